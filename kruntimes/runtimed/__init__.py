"""runtimed, the agent in every Runtime Pod: local admission, execution, restart recovery (SPEC §4.1)."""
