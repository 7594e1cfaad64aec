package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/transparency-dev/merkle/compact"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/tlog"
	"github.com/evidence-ledger/ledger/witness"
)

// witnessRound bounds one witnessing round; witnessInterval is the longest
// wait between rounds when nothing is appended.
const (
	witnessRound    = 30 * time.Second
	witnessInterval = time.Minute
)

// startWitnesser reads the witness policy, opens the Witnesser over st
// (state file statePath, default witness-state.json in keyDir) and runs it
// until ctx ends or stop is called (stop waits for the round in flight).
// It returns the Witnesser and a store that asks it for a round after every
// append. An empty policyPath runs nothing.
func startWitnesser(ctx context.Context, st ledger.Store, policyPath, statePath, keyDir string, log *slog.Logger) (w *witness.Witnesser, served ledger.Store, stop func(), err error) {
	if policyPath == "" {
		return nil, st, func() {}, nil
	}
	b, err := readCapped(policyPath)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("--witness-policy: %w", err)
	}
	pol, err := witness.ParsePolicy(b)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("--witness-policy %s: %w", policyPath, err)
	}
	if statePath == "" {
		statePath = filepath.Join(keyDir, "witness-state.json")
	}
	w, err = witness.New(witness.Config{Log: st, LogKey: st.VerifierKey(), Policy: pol, StatePath: statePath, Logger: log})
	if err != nil {
		return nil, nil, nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); w.Run(rctx, witnessInterval, witnessRound) }()
	return w, notifyingStore{Store: st, w: w}, func() { cancel(); <-done }, nil
}

// notifyingStore asks the Witnesser for a round after each append; the
// append itself never waits for a witness.
type notifyingStore struct {
	ledger.Store
	w *witness.Witnesser
}

// ProbeStorage forwards to the wrapped store's disk probe, when it has
// one (web's /healthz recovers from a full disk through it).
func (s notifyingStore) ProbeStorage(ctx context.Context) error {
	if p, ok := s.Store.(interface{ ProbeStorage(context.Context) error }); ok {
		return p.ProbeStorage(ctx)
	}
	return nil
}

func (s notifyingStore) Append(ctx context.Context, recs []ledger.Record, idemKey string) (*ledger.AppendResult, error) {
	res, err := s.Store.Append(ctx, recs, idemKey)
	if err == nil {
		s.w.Notify()
	}
	return res, err
}

// Checkpoints forwards the checkpoint history of the wrapped store.
func (s notifyingStore) Checkpoints(ctx context.Context, f ledger.CheckpointFilter) ([]ledger.Checkpoint, string, error) {
	cl, ok := s.Store.(ledger.CheckpointLister)
	if !ok {
		return nil, "", ledger.Errorf(ledger.CodeInternal, "the store keeps no checkpoint history")
	}
	return cl.Checkpoints(ctx, f)
}

// LastWitnessed implements ledger.WitnessedLog from the Witnesser's
// status.
func (s notifyingStore) LastWitnessed() (uint64, ledger.Hash, bool) {
	lw := s.w.Status().LastWitnessed
	if lw == nil {
		return 0, ledger.Hash{}, false
	}
	return lw.Size, lw.Root, true
}

// ReadNodes forwards to the wrapped store's node reader (web's tiles),
// when it has one.
func (s notifyingStore) ReadNodes(ctx context.Context, ids []compact.NodeID) ([][]byte, error) {
	if nr, ok := s.Store.(tlog.NodeReader); ok {
		return nr.ReadNodes(ctx, ids)
	}
	return nil, ledger.Errorf(ledger.CodeInternal, "the store reads no tree nodes")
}
