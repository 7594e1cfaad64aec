package ledger

import (
	"context"
	"encoding/json"
	"time"
)

// Record is one fact to append: its kind and canonical JSON body (see
// CanonicalBody). The store derives the entry id and index columns from it.
type Record struct {
	Kind Kind
	Body json.RawMessage
	// RecordedBy, on an evidence record, is set by the server for the
	// one who recorded it: preparation decodes Body (which must not carry
	// recorded_by itself: a CodeInvalid error names the field) and sets
	// it, so the canonical record holds it as if Body had. Ignored for
	// other kinds.
	RecordedBy *Recorder

	prepared *Prepared // set by Prepared.Record: Body already prepared
}

// AppendedEntry is one entry of an AppendResult. Existing is true when an
// identical record was already in the log: nothing was appended for it and
// Entry is the original.
type AppendedEntry struct {
	Entry
	Existing bool           `json:"existing"`
	Proof    InclusionProof `json:"inclusion_proof"`
}

// AppendResult answers an Append: one AppendedEntry per input record, in
// order, and the signed checkpoint the proofs are against.
type AppendResult struct {
	Entries    []AppendedEntry `json:"entries"`
	Checkpoint Checkpoint      `json:"checkpoint"`
}

// EvidenceEntry is an evidence record with its log entry.
type EvidenceEntry struct {
	Entry
	Evidence Evidence `json:"evidence"`
}

// HeadEntry is a head verification with its log entry.
type HeadEntry struct {
	Entry
	Head HeadVerification `json:"head"`
}

// EvidenceFilter selects evidence. Empty fields do not filter. Commit and
// ArtifactDigest match as prefixes (4 to 64 lowercase hex digits); Cursor is the
// opaque Next value of a previous page; Limit defaults to 50, at most 1000.
// AsOfSize, when not 0, reads the log as of that tree size: only entries
// with index < AsOfSize. Results are newest first (descending log index).
type EvidenceFilter struct {
	Lane           string
	Backend        Backend
	Status         Status
	Repository     string
	Commit         string
	ArtifactDigest string
	Since          time.Time // recorded at or after
	AsOfSize       uint64
	Cursor         string
	Limit          int
}

// EntryFilter selects log entries of one kind by key. Key is the kind's
// index key (see EntryKey): the release version for releases, waivers and
// approvals, the repository for heads, the lane for evidence. AsOfSize,
// Cursor and Limit are as in EvidenceFilter.
type EntryFilter struct {
	Kind     Kind
	Key      string
	AsOfSize uint64
	Cursor   string
	Limit    int
}

// HeadFilter selects head verifications (newest first). AsOfSize, Cursor
// and Limit are as in EvidenceFilter.
type HeadFilter struct {
	Repository string
	Commit     string // exact or prefix (>= 4)
	Verdict    Verdict
	AsOfSize   uint64
	Cursor     string
	Limit      int
}

// Scope is a token's permission. admin implies record, run and read;
// record implies read; run (queue and cancel runs, see package runs)
// implies read only: a run token cannot record evidence, and a record
// token cannot queue runs.
type Scope string

// The scopes.
const (
	ScopeRead   Scope = "read"
	ScopeRecord Scope = "record"
	ScopeAdmin  Scope = "admin"
	ScopeRun    Scope = "run"
)

// Allows reports whether a token of scope s may act with need.
func (s Scope) Allows(need Scope) bool {
	if need == ScopeRun {
		return s == ScopeRun || s == ScopeAdmin
	}
	if s == ScopeRun {
		return need == ScopeRead
	}
	rank := map[Scope]int{ScopeRead: 1, ScopeRecord: 2, ScopeAdmin: 3}
	return rank[s] >= rank[need] && rank[need] > 0
}

// Token is a stored API token. The secret is shown once at creation and
// stored only as its SHA-256 hash. Roles name the manual gates' roles the
// holder may approve for (e.g. "release-manager").
type Token struct {
	ID        string     `json:"id"`
	Name      string     `json:"name"`
	Scope     Scope      `json:"scope"`
	Roles     []string   `json:"roles,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
	// Repositories, Lanes and Backends restrict the evidence the token may
	// record (empty: any; see Covers); ExpiresAt is when it stops
	// authenticating (nil: never).
	Repositories []string   `json:"repositories,omitempty"`
	Lanes        []string   `json:"lanes,omitempty"`
	Backends     []Backend  `json:"backends,omitempty"`
	ExpiresAt    *time.Time `json:"expires_at,omitempty"`
}

// AuditReport is the result of a full audit of the log.
type AuditReport struct {
	OK          bool   `json:"ok"`
	Leaves      uint64 `json:"leaves"`
	Checkpoints int    `json:"checkpoints"`
	Root        Hash   `json:"root"`
	// FirstBadIndex is the first leaf index found inconsistent (-1 when OK
	// or when the problem is not tied to one leaf).
	FirstBadIndex int64  `json:"first_bad_index"`
	Problem       string `json:"problem,omitempty"`
	// BadKind is the kind column of the leaf at FirstBadIndex ("" when the
	// problem is not one leaf's), and Failure what failed (AuditFailure*):
	// an operator tells a reading fault of the build (FailureLayout: the
	// leaf's bytes hash to the signed tree, the build cannot decode them)
	// from tampering (every other class) with them.
	BadKind string `json:"bad_kind,omitempty"`
	Failure string `json:"failure,omitempty"`
	// DuplicateLeaves counts leaves whose content id an earlier leaf
	// already has (only a ledger older than schema 5, appending to a
	// migrated database, could append them; they are signed history and
	// stay, and their id names the earlier leaf). FirstDuplicate is the
	// smallest such index (-1 when none). Duplicates do not fail an audit.
	DuplicateLeaves uint64 `json:"duplicate_leaves"`
	FirstDuplicate  int64  `json:"first_duplicate"`
	// KeyChain is the log's signing keys, first to last, as its rotation
	// leaves give them (one key when it never rotated); empty when the
	// audit stopped before building it.
	KeyChain KeyChain `json:"key_chain,omitempty"`
}

// The classes of AuditReport.Failure.
const (
	// FailureHash: a leaf's stored bytes do not hash to its stored leaf
	// hash, or its body not to its entry id (the bytes were edited).
	FailureHash = "hash"
	// FailureEnvelope: a leaf's bytes are not the canonical envelope of
	// its row's index, kind, id and time (edited, reordered or copied).
	FailureEnvelope = "envelope"
	// FailureLayout: a leaf's bytes verify but its body does not decode
	// as its kind's layout: a reading fault of this build, not an edit.
	FailureLayout = "layout"
	// FailureProjection: a projection row or column (a query index)
	// disagrees with the leaf it was derived from.
	FailureProjection = "projection"
	// FailureTree: leaves missing, repeated, inserted, or the stored tree
	// or a checkpoint's root disagreeing with the leaves.
	FailureTree = "tree"
	// FailureCheckpoint: a checkpoint's signature, origin or key chain.
	FailureCheckpoint = "checkpoint"
)

// LogWriter appends facts to the log. Implementations are safe for
// concurrent use.
type LogWriter interface {
	// Append validates and appends recs atomically (all or none) and signs a
	// checkpoint covering them. Records identical to ones already logged are
	// not appended again. A non-empty idemKey that was seen before returns the
	// original result (CodeConflict when the records differ).
	Append(ctx context.Context, recs []Record, idemKey string) (*AppendResult, error)
}

// LogReader reads the log itself: entries by id or index, signed
// checkpoints and Merkle proofs. Implementations are safe for concurrent
// use.
type LogReader interface {
	// Entry returns the entry with content id id, or CodeNotFound.
	Entry(ctx context.Context, id string) (Entry, error)
	// EntryAt returns the entry at index, or CodeNotFound.
	EntryAt(ctx context.Context, index uint64) (Entry, error)
	// Checkpoint returns the latest signed checkpoint.
	Checkpoint(ctx context.Context) (Checkpoint, error)
	// CheckpointAt returns the signed checkpoint of tree size size (0: the
	// latest), or CodeNotFound when none was signed at that size.
	CheckpointAt(ctx context.Context, size uint64) (Checkpoint, error)
	InclusionProof(ctx context.Context, index, size uint64) (InclusionProof, error)
	ConsistencyProof(ctx context.Context, from, to uint64) (ConsistencyProof, error)
}

// Queries answers the projections gates, the API and the dashboard read.
// Each answer is one page, newest first, with the opaque cursor of the next
// page ("" after the last). Implementations are safe for concurrent use.
type Queries interface {
	Entries(ctx context.Context, f EntryFilter) (entries []Entry, next string, err error)
	Evidence(ctx context.Context, f EvidenceFilter) (entries []EvidenceEntry, next string, err error)
	Heads(ctx context.Context, f HeadFilter) (entries []HeadEntry, next string, err error)
}

// Keys is the log's signing identity.
type Keys interface {
	// VerifierKey returns the signed-note verifier key of the checkpoints.
	VerifierKey() string
	// SignNote signs text (a readiness verdict, say) with the log key as a
	// signed note.
	SignNote(text string) (string, error)
}

// TokenStore keeps API tokens. Implementations are safe for concurrent use.
type TokenStore interface {
	CreateToken(ctx context.Context, name string, scope Scope, roles []string) (secret string, t Token, err error)
	// CreateScopedToken creates a token with the evidence scope and expiry
	// of spec (CreateToken is it with no restriction and no expiry).
	CreateScopedToken(ctx context.Context, spec TokenSpec) (secret string, t Token, err error)
	Tokens(ctx context.Context) ([]Token, error)
	RevokeToken(ctx context.Context, idOrName string) error
	// Authenticate returns the live token whose secret is given, or a
	// CodeUnauthorized error ("unknown token", "token expired", revoked).
	Authenticate(ctx context.Context, secret string) (Token, error)
}

// Auditor checks a whole log.
type Auditor interface {
	Audit(ctx context.Context) (AuditReport, error)
}

// Reader is what gates and read-only pages need: the log and its
// projections.
type Reader interface {
	LogReader
	Queries
}

// Store is the evidence ledger's persistence as cmd wires it: the log, its
// projections, its key, tokens and the audit. Implementations must be safe
// for concurrent use.
type Store interface {
	LogWriter
	LogReader
	Queries
	Keys
	TokenStore
	Auditor
	Close() error
}

// EntriesAtReader reads the stored leaves at the indexes idx in one round
// trip, in any order; indexes with no leaf are absent from the answer.
// tlog.VerifiedStore reads the leaves its query index selects through it.
type EntriesAtReader interface {
	EntriesAt(ctx context.Context, idx []uint64) ([]Entry, error)
}
