"""One small module per state machine (DESIGN.md section 2).

Each module holds the machine's states, its allowed moves and the functions that perform
them. A move is one guarded UPDATE filtered on the expected source state (and, for tasks, the
lease token); its row count says whether it happened. Nothing else assigns a state.
"""
