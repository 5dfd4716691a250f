"""Device claims (SPEC §7): the pure core that the scheduler, runtimed and replay stand on.

A Run asks for devices of its Runtime Pod by class, CEL selector and constraint; this
package holds the values and decisions that need no Kubernetes client, no SQL and no
threads: semantic versions and whole-number quantities for selectors (`semver`,
`quantities`), the static rules every selector passes before it is compiled
(`cel_rules`), the CEL engine and its memoised verdicts (`cel_engine`), a pod's typed
device inventory (`inventory`) and its annotation (`inventory_codec`), a Runtime's
device spec (`runtime_spec`), a Run's device claim and the classes it names
(`claims`), what a pod's devices already give away (`usage`), deterministic first-fit
allocation on one pod (`allocation`), `status.devices` as Bind writes it (`results`),
and runtimed's check by device name (`admission`, which loads no CEL engine).

Everything here takes plain JSON-like documents, so the API layer, the scheduler,
runtimed, `simulate` and replay can all use it; nothing here imports the API layer,
the Kubernetes client or SQL (tests/unit/test_devices_layering.py).
"""
