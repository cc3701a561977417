"""The sandbox: a local target website and the three provider APIs, with switchable faults.

Each simulator is an aiohttp sub-application (`make_app(**options)`) mounted by
recovery.sandbox.server under its own prefix; `runner.start_in_thread` serves any of them on a
free loopback port for tests.
"""
