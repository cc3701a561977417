"""Quality: committed observations to an accepted, published run.

In: observations the commit judged (`verdicts`), the spec's rules. Out: validation results,
quarantined partitions, a run's acceptance state, recovery batches and the figures shown.
- `verdicts` (each row judged at commit), `validation` and `validation_sql` (rules per run and
  partition from the stored verdicts), `row_states` (held rows derived from quarantine),
  `provisional` (early quarantine while a run collects);
- `acceptance` (accept, reject, publish, promote) and `acceptance_steps` (the loops' hooks);
- `reruns` (the one selection, recovery batches), `corrections` (superseding published rows),
  `triage` (notes and reviewed marks);
- `status`, `figures` (every figure defined once) and `confirmations` (what an action will do);
- `quarantine` (the quarantine page's data, read once) and `errorclasses` (the classes present
  in a run, for the batch form).
"""
