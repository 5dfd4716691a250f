"""A second, plain implementation of SPEC §2–§3.4 that checks `kruntimes simulate` (issue 12).

- `syntax`, `objects`, `planner`: the model. Written from the SPEC text (amended
  2026-12-01) with dicts, loops and `Fraction`; it imports nothing from kruntimes.
- `compare`: runs `simulate` in-process and the model on the same YAML; its
  docstring says exactly what is compared.
- `workloads`: the random workload generator (any `random.Random`).
- `test_model_tables.py`: the model against the SPEC's own sentences and examples.
- `test_differential.py`: 200 derandomised hypothesis workloads, model vs simulate.
- `test_findings.py` + `findings/`: the smallest workload of each disagreement found.
- `test_whole_file_errors.py`: duplicates and unparsable creation times.
- `campaign`: `python -m tests.model.campaign --workloads 10000 --seed 12 --out DIR`
  prints the match rate, classifies each difference by the issue 12 defect whose
  emulation (`planner.QUIRKS`) explains it, and writes the first differing workloads.

Device claims (SPEC §7.5, issue 26), the same way:
- `devices_model`: allocation on one pod, from the SPEC text; `devices_oracle`: celpy
  with upstream's `device` variable, for the model and the engine's oracle test.
- `devices_workloads`, `devices_compare`: random device workloads; product vs model.
- `test_devices_differential.py`: 300 derandomised workloads.
- `devices_campaign`: `python -m tests.model.devices_campaign --workloads 20000 --seed 26`
  (2026-12-05: 20,000/20,000 identical, 46,023 pods; seed 7: 10,000/10,000; `--mutant`
  knocks one rule out of the product to show the campaign notices).
"""
