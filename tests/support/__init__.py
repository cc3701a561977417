"""What every tier's tests build on: factories, the dashboard world, datasets and simulators.

Tests in `unit/`, `db/`, `worker/` and `browser/` import from here and never from another
tier's folder, so a tier can be run, moved or deleted without breaking the others.
"""
