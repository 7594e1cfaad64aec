package web

import (
	"net/http"
	"strings"

	"github.com/evidence-ledger/ledger/ledger"
)

type headsPage struct {
	pageBase
	Repository, Commit, Verdict string
	Filtered                    bool
	Rows                        []ledger.HeadEntry
	Pager                       pager
	Problem                     string
}

// Verdicts are the filter's options.
func (headsPage) Verdicts() []ledger.Verdict {
	return []ledger.Verdict{ledger.VerdictGood, ledger.VerdictBad, ledger.VerdictUnknownKey, ledger.VerdictExpiredKey,
		ledger.VerdictExpiredSignature, ledger.VerdictRevoked, ledger.VerdictUnsigned, ledger.VerdictError}
}

// pageHeads is GET /heads: every verified head, newest first, with scheme,
// signer, key, verdict, policy decision and time; filtered by repository,
// commit prefix and verdict, paginated by cursor.
func (s *Server) pageHeads(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	data := headsPage{
		pageBase:   pageBase{Title: "Heads", Nav: "heads"},
		Repository: strings.TrimSpace(q.Get("repository")), Commit: strings.ToLower(strings.TrimSpace(q.Get("commit"))), Verdict: q.Get("verdict"),
	}
	q.Set("repository", data.Repository)
	q.Set("commit", data.Commit)
	data.JSON = "/api/v1/heads"
	if e := cleanQuery(q).Encode(); e != "" {
		data.JSON += "?" + e
	}
	data.Filtered = data.Repository != "" || data.Commit != "" || data.Verdict != ""
	f := ledger.HeadFilter{Repository: data.Repository, Commit: data.Commit, Verdict: ledger.Verdict(data.Verdict), Cursor: q.Get("cursor")}
	var err error
	if f.Verdict != "" && !validVerdict(f.Verdict) {
		err = ledger.FieldError("verdict", "unknown verdict %q", f.Verdict)
	} else {
		data.Rows, data.Pager.Next, err = s.store.Heads(r.Context(), f)
	}
	if err != nil {
		if ledger.ErrorCode(err) != ledger.CodeInvalid {
			s.renderError(w, r, err)
			return
		}
		data.Problem = err.Error()
		s.render(w, r, http.StatusBadRequest, "heads", data)
		return
	}
	data.Pager = newPager("/heads", q, f.Cursor, data.Pager.Next)
	s.render(w, r, http.StatusOK, "heads", data)
}

func validVerdict(v ledger.Verdict) bool {
	for _, x := range (headsPage{}).Verdicts() {
		if v == x {
			return true
		}
	}
	return false
}
