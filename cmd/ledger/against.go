package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"

	"strings"
	"time"

	"github.com/evidence-ledger/ledger/client"
	"github.com/evidence-ledger/ledger/ledger/tlog"
)

// maxSavedCheckpoint caps a saved checkpoint file or download.
const maxSavedCheckpoint = 1 << 20

// loadSaved reads each --against source: a file, or an http(s) URL
// fetched with a 30 s timeout. Errors name the source, never its content.
func loadSaved(ctx context.Context, sources []string) ([]tlog.SavedCheckpoint, error) {
	var out []tlog.SavedCheckpoint
	for _, src := range sources {
		var b []byte
		var err error
		if u, perr := url.Parse(src); perr == nil && (u.Scheme == "http" || u.Scheme == "https") {
			b, err = fetchSaved(ctx, src)
		} else {
			b, err = readCapped(src)
		}
		if err != nil {
			return nil, fmt.Errorf("--against %s: %w", src, err)
		}
		n, err := tlog.ParseSavedCheckpoint(b)
		if err != nil {
			return nil, fmt.Errorf("--against %s: %w", src, err)
		}
		out = append(out, tlog.SavedCheckpoint{Source: src, Note: n})
	}
	return out, nil
}

func readCapped(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSavedCheckpoint+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxSavedCheckpoint {
		return nil, fmt.Errorf("larger than %d bytes", maxSavedCheckpoint)
	}
	return b, nil
}

func fetchSaved(ctx context.Context, u string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("answered %d", resp.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxSavedCheckpoint+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxSavedCheckpoint {
		return nil, fmt.Errorf("larger than %d bytes", maxSavedCheckpoint)
	}
	return b, nil
}

// readVerifierKey reads a ledger.pub file (one vkey line).
func readVerifierKey(path string) (string, error) {
	b, err := readCapped(path)
	if err != nil {
		return "", fmt.Errorf("--key: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// keyPath returns --key or the data directory's ledger.pub.
func (a *app) keyPath(flag string) string {
	if flag != "" {
		return flag
	}
	return filepath.Join(a.dataDir(), "ledger.pub")
}

// runAuditAgainst is `ledger audit --against`: it proves the log (the
// local database read-only, or --server) extends every saved checkpoint,
// with the public key alone. Exit 0 when all are extended, 1 when one is
// not, 2 on error.
func runAuditAgainst(ctx context.Context, a *app, sources []string, keyFlag string) error {
	vkey, err := readVerifierKey(a.keyPath(keyFlag))
	if err != nil {
		return errExit(2, "audit: %v", err)
	}
	saved, err := loadSaved(ctx, sources)
	if err != nil {
		return errExit(2, "audit: %v", err)
	}
	var log tlog.CheckpointReader
	if a.Server != "" {
		c, err := client.New(a.Server, client.Options{Token: a.Token, Timeout: a.Timeout})
		if err != nil {
			return errExit(2, "audit: %v", err)
		}
		log = c
	} else {
		if p, err := sqlitePath(a.DB); err != nil {
			return errExit(2, "audit: %v", err)
		} else if _, err := os.Stat(p); err != nil && !isPostgres(a.DB) {
			return errExit(2, "audit: database %s: %v", p, err)
		}
		st, _, err := openPublic(ctx, a.DB, a.keyPath(keyFlag), a.log)
		if err != nil {
			return errExit(2, "audit: %v", err)
		}
		defer st.Close()
		log = st
	}
	rep, err := tlog.AuditAgainst(ctx, log, vkey, saved)
	if err != nil {
		return errExit(2, "audit: %v", err)
	}
	if a.JSON {
		a.printJSON(rep)
	} else {
		if rep.Problem != "" {
			fmt.Fprintf(a.stdout, "audit against saved checkpoints FAILED: %s\n", rep.Problem)
		}
		for _, r := range rep.Results {
			if r.Status == tlog.AgainstOK {
				fmt.Fprintf(a.stdout, "ok %s: size %d is extended by the log (size %d)\n", r.Source, r.Size, rep.Size)
			} else {
				fmt.Fprintf(a.stdout, "FAILED %s: %s: %s\n", r.Source, r.Status, r.Problem)
			}
		}
		if rep.PartsBy > 0 {
			fmt.Fprintf(a.stdout, "the log and the saved history part after size %d and at or before size %d\n", rep.ConsistentUpTo, rep.PartsBy)
		}
	}
	if !rep.OK {
		return &exitError{code: 1}
	}
	return nil
}
