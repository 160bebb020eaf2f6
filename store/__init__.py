"""The optional Redis store: a projection of the event log into stored Responses.

Off unless SPATE_STORE_URL is set; until it is, `background` and `previous_response_id`
are 400s naming that variable and `store=true` runs unstored.
"""
