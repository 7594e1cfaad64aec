package auth

import (
	"context"
	"fmt"
	"github.com/evidence-ledger/ledger/ledger"
	"strings"
)

// ResolvePolicy returns the policy that ref names as of log size asOf (0:
// the latest): with ref "sha256:<hex>", the newest policy leaf of that
// digest; otherwise ref is a name and the newest leaf of that name. It
// reads every page it needs. Errors: ledger.CodeInvalid (field "policy") for a
// ref that is neither a name nor a digest, ledger.CodeNotFound when no policy
// matches. Safe for concurrent use when q is.
func ResolvePolicy(ctx context.Context, q ledger.Queries, ref string, asOf uint64) (ledger.PolicyEntry, error) {
	byDigest := strings.HasPrefix(ref, "sha256:")
	switch {
	case byDigest && !ledger.ValidDigest(ref):
		return ledger.PolicyEntry{}, ledger.FieldError("policy", "a policy digest is sha256:<64 lowercase hex>")
	case !byDigest && !ledger.ValidPolicyName(ref):
		return ledger.PolicyEntry{}, ledger.FieldError("policy", "must name a registered policy (1-64 of [a-z0-9._-]) or its sha256 digest; inline policies and paths are not accepted")
	}
	f := ledger.EntryFilter{Kind: ledger.KindPolicy, AsOfSize: asOf, Limit: 1000}
	if !byDigest {
		f.Key = ref
	}
	for {
		es, next, err := q.Entries(ctx, f)
		if err != nil {
			return ledger.PolicyEntry{}, err
		}
		for _, e := range es {
			var p ledger.PolicyRecord
			if err := ledger.DecodeStrict(e.Body, &p); err != nil {
				return ledger.PolicyEntry{}, fmt.Errorf("policy entry %s: %w", e.ID, err)
			}
			if (byDigest && p.Digest == ref) || (!byDigest && p.Name == ref) {
				return ledger.PolicyEntry{Entry: e, Policy: p}, nil
			}
		}
		if next == "" {
			return ledger.PolicyEntry{}, ledger.NotFound("no registered policy %s (register one with `ledger policy apply`)", ref)
		}
		f.Cursor = next
	}
}
