package ledger

import (
	"context"
	"fmt"
	"strings"
)

// ResolvePolicy returns the policy that ref names as of log size asOf (0:
// the latest): with ref "sha256:<hex>", the newest policy leaf of that
// digest; otherwise ref is a name and the newest leaf of that name. It
// reads every page it needs. Errors: CodeInvalid (field "policy") for a
// ref that is neither a name nor a digest, CodeNotFound when no policy
// matches. Safe for concurrent use when q is.
func ResolvePolicy(ctx context.Context, q Queries, ref string, asOf uint64) (PolicyEntry, error) {
	byDigest := strings.HasPrefix(ref, "sha256:")
	switch {
	case byDigest && !ValidDigest(ref):
		return PolicyEntry{}, FieldError("policy", "a policy digest is sha256:<64 lowercase hex>")
	case !byDigest && !ValidPolicyName(ref):
		return PolicyEntry{}, FieldError("policy", "must name a registered policy (1-64 of [a-z0-9._-]) or its sha256 digest; inline policies and paths are not accepted")
	}
	f := EntryFilter{Kind: KindPolicy, AsOfSize: asOf, Limit: 1000}
	if !byDigest {
		f.Key = ref
	}
	for {
		es, next, err := q.Entries(ctx, f)
		if err != nil {
			return PolicyEntry{}, err
		}
		for _, e := range es {
			var p PolicyRecord
			if err := DecodeStrict(e.Body, &p); err != nil {
				return PolicyEntry{}, fmt.Errorf("policy entry %s: %w", e.ID, err)
			}
			if (byDigest && p.Digest == ref) || (!byDigest && p.Name == ref) {
				return PolicyEntry{Entry: e, Policy: p}, nil
			}
		}
		if next == "" {
			return PolicyEntry{}, NotFound("no registered policy %s (register one with `ledger policy apply`)", ref)
		}
		f.Cursor = next
	}
}
