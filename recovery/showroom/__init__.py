"""Showroom: the product shown working on the local sandbox.

`demo` (the one-command demo: migrate, users, sandbox, workers, web server, a dataset and a
run), `demo_story` (seed 002's worked example as a checklist read from the database, and its
one action) and `drill` (seed 002's recovery drill on real worker processes, with its report).
Nothing in the engine imports this wing.
"""
