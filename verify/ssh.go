package verify

import (
	"bytes"
	"fmt"
	"strings"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/hiddeco/sshsig"
	"golang.org/x/crypto/ssh"
)

// sshNamespace is the sshsig namespace git signs with (gpg-interface.c).
const sshNamespace = "git"

// sshVerifyTime is the time git has ssh-keygen judge validity windows at:
// the committer or tagger time, or, when that is absent, unparsable or 0
// (git passes no -Overify-time then), the verification time.
func sshVerifyTime(o *Object, opts *Options) time.Time {
	if o.SignerTime.IsZero() || o.SignerTime.Unix() <= 0 {
		return opts.now()
	}
	return o.SignerTime
}

// verifySSH checks an SSHSIG signature as git does (gpg-interface.c,
// verify_ssh_signed_buffer and parse_ssh_output, with ssh-keygen's
// sshsig.c underneath):
//   - a signature that does not verify over the payload in namespace "git"
//     reads B (ssh-keygen -Y check-novalidate fails);
//   - ssh-keygen -Y find-principals at the verify time (FindPrincipals)
//     finding nothing reads U;
//   - otherwise each principal found is tried, in order, with ssh-keygen
//     -Y verify -I principal (VerifyPrincipal: namespaces and windows
//     judged); the first that passes is the signer (G); none passing reads
//     B, as git reads a failed verify.
//
// FIDO (sk) signatures verify whatever their flags, as ssh-keygen's do;
// the flags and counter are reported in r.SK.
func verifySSH(o *Object, opts *Options, r *Result) *Error {
	sig, err := sshsig.Unarmor(bytes.TrimRight(o.Signature, "\n"))
	if err != nil {
		r.Verdict, r.Letter = ledger.VerdictError, "E"
		return wrapErr(ErrMalformed, err, "ssh signature")
	}
	r.Key = ssh.FingerprintSHA256(sig.PublicKey)
	r.SignedAt = o.SignerTime
	cert, isCert := sig.PublicKey.(*ssh.Certificate)
	if isCert {
		r.Key = ssh.FingerprintSHA256(cert.Key)
	}
	if sig.Namespace != sshNamespace {
		r.Verdict, r.Letter = ledger.VerdictBad, "B"
		return newErr(ErrBadSignature, "ssh signature namespace %q, want %q", sig.Namespace, sshNamespace)
	}
	if isCert {
		// OpenSSH checks the CA's signature when it parses a certificate.
		if err := checkCertSignature(cert); err != nil {
			r.Verdict, r.Letter = ledger.VerdictBad, "B"
			return wrapErr(ErrBadSignature, err, "ssh certificate")
		}
	}
	pub := skAware(sig.PublicKey)
	if err := sshsig.Verify(bytes.NewReader(o.Payload), sig, pub, sig.HashAlgorithm, sshNamespace); err != nil {
		r.Verdict, r.Letter = ledger.VerdictBad, "B"
		return wrapErr(ErrBadSignature, err, "ssh")
	}
	if sk, ok := pub.(*skKey); ok {
		r.SK = sk.last
	}
	if opts.AllowedSigners == nil {
		r.Verdict, r.Letter = ledger.VerdictGood, "U"
		return newErr(ErrUnknownKey, "good signature, no allowed-signers file configured")
	}
	at := sshVerifyTime(o, opts)
	found, outside := opts.AllowedSigners.FindPrincipals(sig.PublicKey, at)
	if found == nil {
		r.Verdict, r.Letter = ledger.VerdictGood, "U"
		if outside {
			r.Verdict = ledger.VerdictExpiredKey
			return newErr(ErrExpired, "good signature, key not valid at %s in allowed signers", at.UTC().Format("2006-01-02T15:04:05Z"))
		}
		return newErr(ErrUnknownKey, "good signature, key not in allowed signers%s", opts.AllowedSigners.skippedNote())
	}
	for _, p := range found {
		if opts.AllowedSigners.VerifyPrincipal(sig.PublicKey, p, sshNamespace, at) == nil {
			continue
		}
		if r.Signer == "" {
			r.Signer = p
		}
		if !contains(r.Principals, p) {
			r.Principals = append(r.Principals, p)
		}
	}
	if r.Signer == "" {
		// find-principals does not read namespaces; verify does, and git
		// reads its failure as a bad signature.
		r.Verdict, r.Letter = ledger.VerdictBad, "B"
		return newErr(ErrBadSignature, "key found for %s in allowed signers, but no line admits it for namespace %q at %s", strings.Join(found, ","), sshNamespace, at.UTC().Format("2006-01-02T15:04:05Z"))
	}
	r.Verdict, r.Letter = ledger.VerdictGood, "G"
	return nil
}

func (as *AllowedSigners) skippedNote() string {
	if len(as.Skipped) == 0 {
		return ""
	}
	var b strings.Builder
	for i, s := range as.Skipped {
		if i == 3 {
			fmt.Fprintf(&b, "; %d more", len(as.Skipped)-3)
			break
		}
		fmt.Fprintf(&b, "; line %d skipped: %s", s.Line, s.Reason)
	}
	return " (ssh-keygen skips unreadable lines" + b.String() + ")"
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
