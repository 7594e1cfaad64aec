// Package verify checks signed git heads: OpenPGP, SSH and X.509 (CMS,
// Sigstore gitsign and S/MIME) signatures on commits, tags and mergetag
// headers, a YAML trust policy per repository and ref, and tree
// equivalence between a signed head and the reviewed source.
//
// Verification works on raw object bytes as git hashed them: the object id
// is recomputed, the signed payload is derived the way git derives it, and
// ambiguous objects (duplicated singleton headers) are refused. Each check
// yields a cryptographic verdict and git's %G? letter (Result), and, with a
// policy, a separate trust decision (ledger.HeadVerification). Failures
// wrap one sentinel error (ErrUnsigned, ErrUnknownKey, ErrUnknownCA,
// ErrBadSignature, ErrExpired, ErrRevoked, ErrUntrusted, ErrMalformed,
// ErrUnsupportedObjectFormat, ErrNoPolicy) inside an *Error that names the
// object and key.
//
// A server verifies what clients upload the same way (upload.go,
// objecttree.go): VerifyUploadedHead and TreeEquivalenceObjects take raw
// objects (RawObject) in the SHA-1 or SHA-256 object format, recompute
// every id (ErrObjectID on a mismatch) and apply the same rules as
// VerifyHead and TreeEquivalence; CollectHead and CollectTree read what to
// upload from a local repository. Registered policies are self-contained
// bundles (ReadPolicyBundle, PolicyFromBundle) whose digest covers their
// keys.
//
// Outside facts: git's letters and payload rules follow git 2.39
// (gpg-interface.c, commit.c: every header starting with "gpgsig" leaves
// the payload); SSH principals, namespaces, validity windows and FIDO
// signatures follow OpenSSH 9.x (sshsig.c, ssh-keygen.c, sshkey.c, as git
// runs ssh-keygen -Y find-principals then -Y verify); OpenPGP validity
// follows GnuPG 2.2's trust model for fully and ultimately trusted
// certifiers (key-clean.c mark_usable_uid_certs, SHA-1 certifications only
// before 2019-01-19) and keyrings are read as gpg --import reads them;
// Sigstore trust follows the protobuf-specs TrustedRoot read by
// sigstore-go, and gitsign's embedded Rekor entries are verified offline
// with sigstore-go's tlog package.
//
// The package keeps no global state; all functions are safe for concurrent
// use.
package verify
