package web

import (
	"net/http"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/tlogproof"
	"github.com/evidence-ledger/ledger/witness"
)

// cosignedCheckpoint is a checkpoint as /api/v1/log/checkpoint serves it:
// Note carries the log's signature followed by the cosignatures the
// witnesses gave for exactly this checkpoint (c2sp.org/tlog-cosignature),
// named in Cosigners.
type cosignedCheckpoint struct {
	ledger.Checkpoint
	Cosigners []string `json:"cosigners"`
}

// withCosignatures returns cp with the witnesses' cosignatures, when the
// server runs a Witnesser.
func (s *Server) withCosignatures(cp ledger.Checkpoint) any {
	if s.cfg.Witnesser == nil {
		return cp
	}
	n, cosigners := s.cfg.Witnesser.CosignedCheckpoint(cp)
	cp.Note = n
	if cosigners == nil {
		cosigners = []string{}
	}
	return cosignedCheckpoint{Checkpoint: cp, Cosigners: cosigners}
}

// witnessHealth is the witness part of /healthz: whether the latest
// witnessed round met the quorum and since when the log is unwitnessed.
func (s *Server) witnessHealth() map[string]any {
	if s.cfg.Witnesser == nil {
		return nil
	}
	st := s.cfg.Witnesser.Status()
	out := map[string]any{"quorum": st.Quorum, "witnessed": st.Witnessed}
	if !st.UnwitnessedSince.IsZero() {
		out["unwitnessed_since"] = st.UnwitnessedSince.Format(time.RFC3339)
	}
	if st.LastWitnessed != nil {
		out["last_witnessed_size"] = st.LastWitnessed.Size
		out["last_witnessed_at"] = st.LastWitnessed.At.Format(time.RFC3339)
	}
	return out
}

// addWitnessing puts the witnesses' cosignatures and status on the
// overview, when the server runs witnesses.
func (s *Server) addWitnessing(o *Overview) {
	if s.cfg.Witnesser == nil {
		return
	}
	o.Checkpoint.Note, _ = s.cfg.Witnesser.CosignedCheckpoint(o.Checkpoint)
	st := s.cfg.Witnesser.Status()
	o.Witnesses = &st
}

// handleWitnesses answers the Witnesser's status: every witness's size,
// last cosignature and last error, the latest and last witnessed
// checkpoints; 404 when the server runs no witnesses.
func (s *Server) handleWitnesses(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Witnesser == nil {
		s.writeError(w, r, ledger.NotFound("this server has no witness policy (ledger serve --witness-policy)"))
		return
	}
	s.writeJSON(w, http.StatusOK, s.cfg.Witnesser.Status())
}

// serveTLogProof answers the c2sp.org/tlog-proof of entry e: against the
// checkpoint of size (0: the last checkpoint that met the witness quorum
// and includes e, else the latest), with its cosignatures and e's leaf
// bytes as extra data.
func (s *Server) serveTLogProof(w http.ResponseWriter, r *http.Request, e ledger.Entry, size uint64) {
	ctx := r.Context()
	var lw *witness.Cosigned
	if s.cfg.Witnesser != nil {
		lw = s.cfg.Witnesser.Status().LastWitnessed
		if size == 0 && lw != nil && lw.Size > e.Index {
			size = lw.Size
		}
	}
	cp, err := s.store.CheckpointAt(ctx, size)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	signed := cp.Note
	if s.cfg.Witnesser != nil {
		signed, _ = s.cfg.Witnesser.CosignedCheckpoint(cp)
	}
	p, err := tlogproof.New(ctx, s.store, e.Index, cp, signed)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Content-Disposition", `attachment; filename="`+e.ID+`.tlog-proof"`)
	w.WriteHeader(http.StatusOK)
	w.Write(p.Marshal())
}
