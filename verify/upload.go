package verify

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"strings"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
)

// The object formats of a git repository (extensions.objectFormat): the
// hash that names its objects. SHA-256 ids are 64 hex digits.
const (
	FormatSHA1   = "sha1"
	FormatSHA256 = "sha256"
)

// ErrObjectID is the sentinel of an uploaded object whose bytes do not hash
// to the id it was sent with.
var ErrObjectID = errors.New("object id mismatch")

// MaxUploadObjects bounds the objects of one upload.
const MaxUploadObjects = 200000

// RawObject is one git object as uploaded: its type ("commit", "tag",
// "tree"), the id the sender claims and its bytes exactly as `git cat-file
// TYPE ID` prints them (base64 in JSON). The receiver recomputes the id.
type RawObject struct {
	Type string `json:"type"`
	ID   string `json:"id"`
	Data []byte `json:"data"`
}

// HashObject returns the hex id git gives an object of type typ with body
// data in object format format (FormatSHA1, FormatSHA256; "" is SHA-1):
// the hash of "<type> <len>\x00" + data.
func HashObject(format, typ string, data []byte) (string, error) {
	var h hash.Hash
	switch format {
	case "", FormatSHA1:
		h = sha1.New()
	case FormatSHA256:
		h = sha256.New()
	default:
		return "", ledger.FieldError("object_format", "must be sha1 or sha256")
	}
	fmt.Fprintf(h, "%s %d\x00", typ, len(data))
	h.Write(data)
	return hex.EncodeToString(h.Sum(nil)), nil
}

func idLen(format string) int {
	if format == FormatSHA256 {
		return 64
	}
	return 40
}

// checkUploaded recomputes the id of objs[i] and checks its type and the
// id's length. Errors are CodeInvalid *ledger.Error values naming
// "objects[i].<field>"; a mismatch wraps ErrObjectID and names both ids,
// never the bytes.
func checkUploaded(format string, i int, o RawObject, types ...string) (string, error) {
	f := fmt.Sprintf("objects[%d]", i)
	ok := false
	for _, t := range types {
		ok = ok || o.Type == t
	}
	if !ok {
		return "", ledger.FieldError(f+".type", "must be %s", strings.Join(types, " or "))
	}
	if len(o.ID) != idLen(format) || !ledger.LowerHex(o.ID) {
		return "", ledger.FieldError(f+".id", "must be %d lowercase hex digits (object format %s)", idLen(format), orSHA1(format))
	}
	got, err := HashObject(format, o.Type, o.Data)
	if err != nil {
		return "", err
	}
	if got != o.ID {
		e := ledger.FieldError(f+".data", "object id mismatch: the %s bytes hash to %s, not %s", o.Type, got, o.ID)
		e.Err = ErrObjectID
		return "", e
	}
	return got, nil
}

func orSHA1(f string) string {
	if f == "" {
		return FormatSHA1
	}
	return f
}

// parseFormat parses a commit or tag whose id the caller has checked, in
// object format format: the id is the format's hash and, for SHA-256
// commits, the signature is the gpgsig-sha256 header's (git signs a
// commit in its own format's header; git's commit.c gpg_sig_headers).
func parseFormat(format, id, typ string, data []byte) (*Object, error) {
	sigHeader := "gpgsig"
	if format == FormatSHA256 {
		sigHeader = "gpgsig-sha256"
	}
	o, err := parseObject(data, typ, "", sigHeader)
	if err != nil {
		if e, ok := err.(*Error); ok {
			e.Object = id
		}
		return nil, err
	}
	o.ID = id
	n := idLen(format)
	if o.Tree != "" && len(o.Tree) != n || o.Target != "" && len(o.Target) != n {
		return nil, &Error{Object: id, Kind: ErrMalformed, Detail: "names an object id of another object format"}
	}
	return o, nil
}

// HeadUpload is a head to verify from uploaded objects.
type HeadUpload struct {
	// Repository and Ref name the head for the record and policy matching
	// (Ref a full ref name such as refs/heads/main or refs/tags/v1).
	Repository, Ref string
	// Format is the object format (FormatSHA1 when empty).
	Format string
	// Objects[0] is the head (a commit, or an annotated tag); a tag is
	// followed by the object it tags, down to the commit, which may be left
	// out after the last tag (the record then names the tagged id and no
	// tree). Nothing else.
	Objects []RawObject
	// Policy decides trust; nil decides DecisionNoPolicy.
	Policy *Policy
	// Now is the verification time (zero: time.Now()).
	Now time.Time
}

// VerifyUploadedHead verifies an uploaded head as VerifyHead verifies one
// read from a repository: every object's id is recomputed from its bytes
// (ErrObjectID), the head's signature is verified with the policy rule
// covering Repository and Ref, and a tag is peeled through the uploaded
// chain to its commit and tree. Errors are CodeInvalid *ledger.Error
// values naming the field (objects[i].id, .data, .type; ref; repository),
// or *Error (ErrMalformed) for objects that do not parse; the record is
// complete whenever the error is nil, even for untrusted heads. It is safe
// for concurrent use.
func VerifyUploadedHead(u HeadUpload) (ledger.HeadVerification, error) {
	var hv ledger.HeadVerification
	if u.Repository == "" {
		return hv, ledger.FieldError("repository", "required: the repository as the policy and the release name it")
	}
	if u.Ref == "" {
		return hv, ledger.FieldError("ref", "required: the full ref name (refs/heads/main, refs/tags/v1.0)")
	}
	if len(u.Objects) == 0 {
		return hv, ledger.FieldError("objects", "required: the head's commit (or tag, then the commit it tags)")
	}
	if len(u.Objects) > 9 {
		return hv, ledger.FieldError("objects", "a head is a commit behind at most 8 tags")
	}
	objs := make([]*Object, len(u.Objects))
	for i, ro := range u.Objects {
		id, err := checkUploaded(u.Format, i, ro, "commit", "tag")
		if err != nil {
			return hv, err
		}
		if objs[i], err = parseFormat(u.Format, id, ro.Type, ro.Data); err != nil {
			return hv, err
		}
		if i > 0 {
			prev := objs[i-1]
			if prev.Type != "tag" || prev.Target != id || prev.TargetTyp != ro.Type {
				return hv, ledger.FieldError(fmt.Sprintf("objects[%d]", i), "is not the object objects[%d] tags", i-1)
			}
		}
	}
	last := objs[len(objs)-1]
	commit := last
	if last.Type == "tag" {
		// The tag's signature covers the id it tags: without the commit
		// the record names that id and no tree.
		if last.TargetTyp != "commit" {
			return hv, ledger.FieldError("objects", "the chain ends in a tag of a %s: send the objects down to the commit", clip([]byte(last.TargetTyp)))
		}
		commit = &Object{ID: last.Target, Type: "commit"}
	}
	return decideHead(objs[0], commit, u.Repository, u.Ref, u.Policy, u.Now), nil
}

// decideHead verifies head's signature, applies the policy and fills the
// record as VerifyHead does; commit is the commit head peels to.
func decideHead(head, commit *Object, name, refName string, pol *Policy, now time.Time) ledger.HeadVerification {
	if now.IsZero() {
		now = time.Now()
	}
	rule := pol.Match(name, refName)
	var opts Options
	if rule != nil {
		opts = *rule.Options()
	}
	opts.Now = now
	res := VerifyParsed(head, &opts)
	hv := ledger.HeadVerification{
		Repository: name, Ref: refName, Object: head.ID, ObjectType: head.Type,
		Scheme: res.Scheme, Signer: res.Signer, Issuer: res.Issuer, Key: res.Key,
		Verdict: res.Verdict, GitLetter: res.Letter, VerifiedAt: now.UTC(), SignedAt: res.SignedAt,
		Commit: commit.ID, Tree: commit.Tree,
	}
	if pol != nil {
		hv.Policy = pol.Digest
	}
	var reason error = res.Err
	if rule == nil {
		hv.Decision = ledger.DecisionNoPolicy
		if pol != nil {
			reason = errors.Join(res.Err, &Error{Object: head.ID, Kind: ErrNoPolicy, Detail: fmt.Sprintf("repository %s ref %s (is the repository named as the policy names it? pass --repository)", name, refName)})
		}
	} else {
		hv.Decision, reason = rule.Decide(res)
	}
	if reason != nil {
		hv.Reason = reason.Error()
	} else {
		hv.Reason = fmt.Sprintf("%s signature by %s verified (%s)", res.Scheme, res.Signer, res.Letter)
	}
	return hv
}

// HeadSource is what CollectHead reads from a local repository for an
// upload: the repository's name, the full ref name and the objects
// (HeadUpload.Objects).
type HeadSource struct {
	Repository string
	Ref        string
	Format     string
	Objects    []RawObject
}

// CollectHead reads the head that ref names in the repository at repoPath
// (see VerifyHeadOptions for ref and the default repository name) and the
// tag chain down to its commit, as raw objects to upload. SHA-1
// repositories only (go-git reads no other); errors are those of
// VerifyHead.
func CollectHead(repoPath, repository, ref string) (HeadSource, error) {
	var src HeadSource
	repo, err := openRepo(repoPath)
	if err != nil {
		return src, err
	}
	if repository == "" {
		repository = repoName(repo, repoPath)
	}
	if ref == "" {
		ref = "HEAD"
	}
	refName, h, err := resolveRef(repo, ref)
	if err != nil {
		return src, err
	}
	src = HeadSource{Repository: repository, Ref: refName, Format: FormatSHA1}
	for depth := 0; ; depth++ {
		if depth > 8 {
			return src, &Error{Object: h.String(), Kind: ErrMalformed, Detail: "tag chain deeper than 8"}
		}
		o, err := readObject(repo, h)
		if err != nil {
			return src, err
		}
		src.Objects = append(src.Objects, RawObject{Type: o.Type, ID: o.ID, Data: o.Raw})
		if o.Type != "tag" {
			return src, nil
		}
		h = plumbing.NewHash(o.Target)
	}
}

// rawOf reads the raw bytes of any object of repo.
func rawOf(repo *git.Repository, typ plumbing.ObjectType, h plumbing.Hash) ([]byte, error) {
	eo, err := repo.Storer.EncodedObject(typ, h)
	if err != nil {
		return nil, fmt.Errorf("read %s %s: %w", typ, h, err)
	}
	rd, err := eo.Reader()
	if err != nil {
		return nil, fmt.Errorf("read %s %s: %w", typ, h, err)
	}
	defer rd.Close()
	return io.ReadAll(rd)
}
