package web

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/go-json-experiment/json/jsontext"
)

// defaultListLimit is the stores' page size when a list request names no
// limit (ledger.EvidenceFilter).
const defaultListLimit = 50

// listMemory is the most record bytes one list answer asks the store for
// at once: chunks hold listMemory/MaxBody records (at least 1, at most 64),
// since a record is never larger than the request body that carried it.
const listMemory = 16 << 20

// listChunk is the number of records a list answer fetches per store call.
func (s *Server) listChunk() int {
	return min(64, max(1, int(listMemory/s.cfg.MaxBody)))
}

// pageFetch reads one chunk of a listing: at most limit items below cursor,
// with the store's cursor of the rest ("" at the end).
type pageFetch[T any] func(ctx context.Context, cursor string, limit int) ([]T, string, error)

// streamPage answers one page of a listing as the JSON object
// {"<name>": [...], "next_cursor": "..."}, written as it is read: items are
// fetched at most listChunk at a time (fewer when the budget left holds
// fewer of the largest record seen) and each is encoded (encoding/json, the
// shapes of the rest of the API) and written before the next chunk is
// read. The page ends after limit items, at the end of the listing, or
// after the first item that brings the page to Config.PageBytes; in the two
// early cases next_cursor continues below the last item written, so paging
// on reads every item once. Server memory per answer is bounded by one
// chunk of records plus one encoded record, whatever limit asks for.
//
// Errors are answered through the error table (a leaf that fails the read
// check is a 500 naming its index) while nothing has reached the client:
// the status line waits for the first 32 KiB of the answer. An error after
// that aborts the connection (http.ErrAbortHandler) so a client never takes
// a cut page for a whole one. At most
// Config.MaxListings answers stream at once; others wait for a slot.
func streamPage[T any](s *Server, w http.ResponseWriter, r *http.Request, name, cursor string, limit int, fetch pageFetch[T], index func(T) uint64, encode func(T) any) {
	select {
	case s.listings <- struct{}{}:
		defer func() { <-s.listings }()
	case <-r.Context().Done():
		return
	}
	if limit <= 0 {
		limit = defaultListLimit
	}
	chunk := s.listChunk()
	// The first fetch takes one record; later ones as many as the rest of
	// the budget holds at the largest record seen so far, up to chunk.
	items, next, err := fetch(r.Context(), cursor, 1)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	lw := &lazyOK{w: w}
	bw := bufio.NewWriterSize(lw, 32<<10)
	enc := jsontext.NewEncoder(bw)
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		a, ok := v.(listAbort)
		if !ok {
			panic(v)
		}
		if !lw.started {
			s.writeError(w, r, a.err)
			return
		}
		s.log.Error("list answer cut", "method", r.Method, "path", r.URL.Path, "err", a.err)
		panic(http.ErrAbortHandler)
	}()
	fail := func(err error) { panic(listAbort{err}) }
	if err := enc.WriteToken(jsontext.BeginObject); err != nil {
		fail(err)
	}
	if err := enc.WriteToken(jsontext.String(name)); err != nil {
		fail(err)
	}
	if err := enc.WriteToken(jsontext.BeginArray); err != nil {
		fail(err)
	}
	written, bytes, largest, cont := 0, 0, 1, ""
	for {
		for i, it := range items {
			b, err := json.Marshal(encode(it))
			if err != nil {
				fail(err)
			}
			if err := enc.WriteValue(jsontext.Value(b)); err != nil {
				fail(err)
			}
			written++
			bytes += len(b)
			largest = max(largest, len(b))
			more := i < len(items)-1 || next != ""
			if more && (written >= limit || bytes >= s.cfg.PageBytes) {
				cont = ledger.PageCursor(index(it))
				goto done
			}
		}
		if next == "" {
			break
		}
		k := min(chunk, limit-written, max(1, (s.cfg.PageBytes-bytes)/largest+1))
		if items, next, err = fetch(r.Context(), next, k); err != nil {
			fail(err)
		}
	}
done:
	for _, t := range []jsontext.Token{jsontext.EndArray, jsontext.String("next_cursor"), jsontext.String(cont), jsontext.EndObject} {
		if err := enc.WriteToken(t); err != nil {
			fail(err)
		}
	}
	bw.WriteByte('\n')
	if err := bw.Flush(); err != nil {
		fail(err)
	}
}

// listAbort carries an error out of streamPage's loops.
type listAbort struct{ err error }

// lazyOK writes the 200 status line and JSON content type on the first
// write, so an error found before then can still be answered as an error.
type lazyOK struct {
	w       http.ResponseWriter
	started bool
}

func (l *lazyOK) Write(p []byte) (int, error) {
	if !l.started {
		l.started = true
		l.w.Header().Set("Content-Type", "application/json; charset=utf-8")
		l.w.WriteHeader(http.StatusOK)
	}
	return l.w.Write(p)
}
