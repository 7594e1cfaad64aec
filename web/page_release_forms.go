package web

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/evidence-ledger/ledger/admit"
	"github.com/evidence-ledger/ledger/gates"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/go-chi/chi/v5"
)

// The release page's state-changing forms (waiver, manual sign-off, final
// approval, supersede of a failing record) post to HTML handlers here
// (routes.go routes them). Each needs two things:
//
//   - an API token typed into the form's password field, authenticated like
//     a bearer token (waivers, approvals and supersedes need scope admin,
//     sign-offs scope record; gates checks the roles), so a form can do nothing the
//     token could not do through the API;
//   - a CSRF token: a signed double-submit cookie (OWASP "signed double
//     submit cookie"). The browser holds a random HttpOnly, SameSite=Strict
//     cookie; each form carries HMAC-SHA256(server key, cookie || "|" ||
//     form action) in a hidden field. A cross-site page can neither read the
//     cookie nor forge the HMAC, and a token for one action does not work
//     for another. A request whose Origin header names another host is
//     refused outright ("Origin: null" is left to the token check).

const (
	formWaiver   = "waiver"
	formSignoff  = "signoff"
	formApproval = "approval"
	// formSupersede retracts one failing record (admit.Supersede).
	formSupersede = "supersede"

	csrfCookie = "ledger_csrf"
	// maxFormBody caps a form post.
	maxFormBody = 64 << 10
)

// formScope is the token scope each form needs.
var formScope = map[string]ledger.Scope{formWaiver: ledger.ScopeAdmin, formSignoff: ledger.ScopeRecord, formApproval: ledger.ScopeAdmin, formSupersede: ledger.ScopeAdmin}

// formValues are what the user typed (the token is never echoed back).
type formValues struct {
	Form                        string
	Gate, Reason, Expires, Note string
	Entry                       string // the record a supersede retracts
}

// releaseForms is the forms' data on the release page.
type releaseForms struct {
	Waiver, Signoff, Approval string // action paths
	Supersede                 string
	CSRFWaiver, CSRFSignoff   string
	CSRFApproval              string
	CSRFSupersede             string
	V                         formValues
	Problem                   string // why the last post failed
	MinExpiry, MaxExpiry      string // YYYY-MM-DD bounds of the expiry field
	// secret is this browser's CSRF cookie value, which every form of the
	// page (the run form too, fillRunPlan) binds its token to.
	secret string
}

func actionPath(version, form string) string {
	return "/releases/" + url.PathEscape(version) + "/" + form + "s"
}

// csrfSecret returns the browser's CSRF cookie value, setting a new random
// one when the request has none.
func (s *Server) csrfSecret(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(csrfCookie); err == nil && len(c.Value) >= 32 {
		return c.Value
	}
	b := make([]byte, 32)
	rand.Read(b)
	v := base64.RawURLEncoding.EncodeToString(b)
	http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: v, Path: "/releases/", HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	return v
}

// csrfToken is the form token binding the cookie secret to an action.
func (s *Server) csrfToken(secret, action string) string {
	m := hmac.New(sha256.New, s.pages.csrfKey)
	m.Write([]byte(secret))
	m.Write([]byte{'|'})
	m.Write([]byte(action))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// checkCSRF verifies a form post's CSRF token against its cookie and the
// action path, and its Origin header (when sent) against the host.
func (s *Server) checkCSRF(r *http.Request, action string) error {
	// Browsers send "Origin: null" for posts from a page with
	// Referrer-Policy no-referrer (which this server sets); the signed token
	// below still protects those.
	if o := r.Header.Get("Origin"); o != "" && o != "null" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return ledger.Errorf(ledger.CodeForbidden, "cross-origin form post refused")
		}
	}
	c, err := r.Cookie(csrfCookie)
	if err != nil || c.Value == "" {
		return ledger.Errorf(ledger.CodeForbidden, "the form's security cookie is missing: reload the page and submit again (cookies must be enabled)")
	}
	want := s.csrfToken(c.Value, action)
	if !hmac.Equal([]byte(want), []byte(r.PostForm.Get("csrf"))) {
		return ledger.Errorf(ledger.CodeForbidden, "the form's security token does not match: reload the page and submit again")
	}
	return nil
}

// releaseForms fills the forms' data, setting the CSRF cookie if needed.
func (s *Server) releaseForms(w http.ResponseWriter, r *http.Request, version string, v formValues) releaseForms {
	secret := s.csrfSecret(w, r)
	now := s.cfg.Now().UTC()
	f := releaseForms{
		Waiver: actionPath(version, formWaiver), Signoff: actionPath(version, formSignoff), Approval: actionPath(version, formApproval), Supersede: actionPath(version, formSupersede),
		V: v, MinExpiry: now.AddDate(0, 0, 1).Format(time.DateOnly), MaxExpiry: now.Add(gates.MaxWaiverDuration).Format(time.DateOnly),
		secret: secret,
	}
	f.CSRFWaiver, f.CSRFSignoff, f.CSRFApproval = s.csrfToken(secret, f.Waiver), s.csrfToken(secret, f.Signoff), s.csrfToken(secret, f.Approval)
	f.CSRFSupersede = s.csrfToken(secret, f.Supersede)
	if f.V.Expires == "" {
		f.V.Expires = now.AddDate(0, 0, 14).Format(time.DateOnly)
	}
	return f
}

// formToken authenticates the token typed into a form and checks its scope.
func (s *Server) formToken(w http.ResponseWriter, r *http.Request, need ledger.Scope) (ledger.Token, error) {
	secret := strings.TrimSpace(r.PostForm.Get("token"))
	if secret == "" {
		return ledger.Token{}, admit.RequireForm(admit.Anon(), need)
	}
	t, err := s.authCheck(w, r, secret)
	if err != nil {
		return t, err
	}
	return t, admit.RequireForm(admit.ByToken(t), need)
}

// checkFormText refuses a form whose values are not valid UTF-8 or carry
// control characters (tab and line breaks allowed in the reason and note),
// the checks the API's JSON decoding and record validation apply, so a
// form records nothing the API would refuse. Lengths are checked where the
// record is built (gates.MaxNote). Messages name the field, never a value.
func checkFormText(f url.Values) error {
	for _, k := range []string{"gate", "reason", "expires", "note", "entry", "csrf", "token"} {
		for _, v := range f[k] {
			if err := ledger.CheckText(k, v, maxFormBody, false, k == "reason" || k == "note"); err != nil {
				return err
			}
		}
	}
	return nil
}

// parseExpiry reads the waiver expiry: a date (the waiver lapses at the end
// of that day, UTC) or an RFC 3339 time.
func parseExpiry(v string) (time.Time, error) {
	v = strings.TrimSpace(v)
	if d, err := time.Parse(time.DateOnly, v); err == nil {
		return d.Add(24*time.Hour - time.Second), nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	return time.Time{}, ledger.FieldError("expires", "must be a date (YYYY-MM-DD) or an RFC 3339 time")
}

// postReleaseForm handles one of the release page's forms. Success
// redirects (303) back to the release page; a failure re-renders it with
// the problem and the status of the error table.
// renderFormError answers a release-page form post that err refused: a
// server error as the error page; otherwise the release page again (p,
// or loaded when nil) with the status of err and its message shown at the
// form that was posted (v.Form: the run form's own place, or the record
// forms' problem line), the values posted kept in the forms.
func (s *Server) renderFormError(w http.ResponseWriter, r *http.Request, p *releasePage, version string, v formValues, err error) {
	st, body := errorBody(err)
	if st >= 500 {
		s.renderError(w, r, err)
		return
	}
	if p == nil {
		var perr error
		if p, perr = s.loadReleasePage(r, version); perr != nil {
			s.renderError(w, r, perr)
			return
		}
	}
	p.Forms = s.releaseForms(w, r, version, v)
	runProblem := ""
	if v.Form == formRuns {
		runProblem = body.Message
	} else {
		p.Forms.Problem = body.Message
	}
	if perr := s.fillRunPlan(r.Context(), w, r, p, -1, runProblem); perr != nil {
		s.renderError(w, r, perr)
		return
	}
	if st == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="ledger"`)
	}
	s.render(w, r, st, "release", p)
}

func (s *Server) postReleaseForm(form string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		version := chi.URLParam(r, "version")
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBody)
		if err := r.ParseForm(); err != nil {
			s.renderError(w, r, ledger.Errorf(ledger.CodeInvalid, "unreadable form: %v", err))
			return
		}
		v := formValues{Form: form, Gate: r.PostForm.Get("gate"), Reason: r.PostForm.Get("reason"), Expires: r.PostForm.Get("expires"), Note: r.PostForm.Get("note"), Entry: r.PostForm.Get("entry")}
		err := checkFormText(r.PostForm)
		if err == nil {
			err = s.checkCSRF(r, actionPath(version, form))
		}
		var tok ledger.Token
		if err == nil {
			tok, err = s.formToken(w, r, formScope[form])
		}
		if err == nil {
			by := admit.ActorOf(tok)
			now := s.cfg.Now()
			switch form {
			case formWaiver:
				var exp time.Time
				if exp, err = parseExpiry(v.Expires); err == nil {
					_, _, err = admit.Waiver(r.Context(), s.store, by, version, v.Gate, v.Reason, exp, now)
				}
			case formSignoff:
				_, _, err = admit.Signoff(r.Context(), s.store, by, version, v.Gate, v.Note, now)
			case formApproval:
				_, _, _, err = admit.Approval(r.Context(), s.store, by, version, v.Note, now)
			case formSupersede:
				_, _, err = admit.Supersede(r.Context(), s.store, by, version, v.Entry, v.Reason, now)
			}
		}
		if err != nil {
			s.renderFormError(w, r, nil, version, v, err)
			return
		}
		s.log.Info("release form recorded", "form", form, "version", version, "by", tok.Name)
		http.Redirect(w, r, "/releases/"+url.PathEscape(version)+"?done="+form+"#"+form+"s", http.StatusSeeOther)
	}
}
