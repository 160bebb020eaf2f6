"""The body of a request as spate accepts it: pydantic models with strict types, each field's
treatment, reading JSON bodies, and their OpenAPI document."""
