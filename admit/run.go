package admit

import (
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runs"
)

// QueueRun admits spec, a run token t asks to queue (POST /api/v1/runs,
// `ledger run --remote`, the release page's run form): it validates and
// normalizes spec (runs.Spec.Validate), checks its case selection against
// cl, the lanes that select cases and their case ids (runs.Spec.CheckCases),
// and checks that t's scope covers every lane on its backend and
// repository (RunInScope). Errors: CodeInvalid naming the field (lanes,
// backend, labels, cases[i], case_budget, max_samples, ...), CodeForbidden
// naming the member out of scope. Nothing is queued here.
func QueueRun(t ledger.Token, spec *runs.Spec, cl runs.CaseLanes) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	if err := spec.CheckCases(cl); err != nil {
		return err
	}
	return RunInScope(t, spec.Repository, spec.Lanes, spec.Backend)
}
