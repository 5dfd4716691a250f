"""The Runtime controller: Runtime Pods from a Runtime, capacity projection, lost Runs, status (SPEC §4.2)."""
