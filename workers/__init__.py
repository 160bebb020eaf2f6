"""spate workers: consume request events, run the model, publish token and lifecycle events."""

from workers.model.host import shorten_openmp_spin

# Before any worker module imports torch (workers/model/host.py says why).
shorten_openmp_spin()
