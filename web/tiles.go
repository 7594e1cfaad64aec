package web

import (
	"encoding/binary"
	"net/http"
	"strconv"
	"strings"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/tlog"
	"github.com/transparency-dev/merkle/compact"
)

// The log as c2sp.org/tlog-tiles: /checkpoint (the latest signed
// checkpoint note), /tile/<L>/<N>[.p/<W>] (hash tiles: the hashes of the
// tree nodes of level 8·L, indices 256·N to 256·N+W-1; tile height 8) and
// /tile/entries/<N>[.p/<W>] (entry bundles: the leaves' canonical bytes,
// each after its length as a big-endian uint16; a leaf's hash is
// SHA-256(0x00 || bytes), as in the tree). N is written in groups of
// three digits, all but the last prefixed "x" (x001/x234/067). Full tiles
// never change and are served immutable (a year's caching, for proxies and
// CDNs); partial tiles and the checkpoint change as the log grows and are
// served uncached. Only tiles within the latest checkpoint are served.

const (
	tileHeight = 8
	tileWidth  = 1 << tileHeight
	// maxTileLevel bounds L: level 8·L must fit a uint64 tree.
	maxTileLevel = 7
)

// handleTileCheckpoint serves the latest checkpoint's signed note.
func (s *Server) handleTileCheckpoint(w http.ResponseWriter, r *http.Request) {
	cp, err := s.store.Checkpoint(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.Write([]byte(cp.Note))
}

// parseTileIndex parses a tlog-tiles tile index path (x001/x234/067).
func parseTileIndex(p string) (uint64, bool) {
	parts := strings.Split(p, "/")
	var n uint64
	for i, part := range parts {
		if i < len(parts)-1 {
			if !strings.HasPrefix(part, "x") {
				return 0, false
			}
			part = part[1:]
		}
		if len(part) != 3 || strings.Trim(part, "0123456789") != "" {
			return 0, false
		}
		d, _ := strconv.ParseUint(part, 10, 64)
		if n > (1<<63)/1000 {
			return 0, false
		}
		n = n*1000 + d
	}
	return n, len(parts) > 0
}

// parseTilePath parses "<N>[.p/<W>]" into the index and width (256 when
// full). The last index segment carries the ".p" suffix.
func parseTilePath(p string) (n uint64, width int, ok bool) {
	width = tileWidth
	if i := strings.Index(p, ".p/"); i >= 0 {
		w, err := strconv.Atoi(p[i+3:])
		if err != nil || w < 1 || w >= tileWidth || strconv.Itoa(w) != p[i+3:] {
			return 0, 0, false
		}
		p, width = p[:i], w
	}
	n, ok = parseTileIndex(p)
	return n, width, ok
}

// handleTile serves hash tiles and entry bundles (/tile/*).
func (s *Server) handleTile(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.Path, "/tile/")
	level, path, _ := strings.Cut(rest, "/")
	entries := level == "entries"
	var lv int
	if !entries {
		var err error
		if lv, err = strconv.Atoi(level); err != nil || lv < 0 || lv > maxTileLevel || strconv.Itoa(lv) != level {
			s.writeError(w, r, ledger.NotFound("no tile %s: the level must be 0 to %d or \"entries\"", r.URL.Path, maxTileLevel))
			return
		}
	}
	n, width, ok := parseTilePath(path)
	if !ok {
		s.writeError(w, r, ledger.NotFound("no tile %s: want /tile/<L>/<N>[.p/<W>] with N in three-digit groups (x001/x234/067) and W from 1 to 255", r.URL.Path))
		return
	}
	cp, err := s.store.Checkpoint(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	// The tile's last node must be within the tree: its leaves end at
	// (256·N + W) << (8·L).
	shift := uint(tileHeight * lv)
	end := n*tileWidth + uint64(width)
	if end < n || end > ^uint64(0)>>shift || end<<shift > cp.Size {
		s.writeError(w, r, ledger.NotFound("tile %s is beyond the latest checkpoint (size %d)", r.URL.Path, cp.Size))
		return
	}
	var body []byte
	if entries {
		body, err = s.entryBundle(r, n*tileWidth, width)
	} else {
		body, err = s.hashTile(r, lv, n*tileWidth, width)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	if width == tileWidth {
		w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		w.Header().Set("Cache-Control", "no-cache")
	}
	w.Write(body)
}

// hashTile reads the width node hashes of level 8·lv from index first.
func (s *Server) hashTile(r *http.Request, lv int, first uint64, width int) ([]byte, error) {
	nr, ok := s.store.(tlog.NodeReader)
	if !ok {
		return nil, ledger.Errorf(ledger.CodeInternal, "this store serves no tiles")
	}
	ids := make([]compact.NodeID, width)
	for i := range ids {
		ids[i] = compact.NewNodeID(uint(tileHeight*lv), first+uint64(i))
	}
	hs, err := nr.ReadNodes(r.Context(), ids)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, 32*width)
	for _, h := range hs {
		out = append(out, h...)
	}
	return out, nil
}

// entryBundle reads the width leaves from index first, each as a
// big-endian uint16 length and the canonical bytes. A leaf over 65535
// bytes cannot be written in a bundle: the bundle is refused naming it.
func (s *Server) entryBundle(r *http.Request, first uint64, width int) ([]byte, error) {
	var out []byte
	for i := range uint64(width) {
		e, err := s.store.EntryAt(r.Context(), first+i)
		if err != nil {
			return nil, err
		}
		if len(e.Raw) > 0xffff {
			return nil, ledger.Errorf(ledger.CodeNotFound, "entry bundle %d: leaf %d is %d bytes, more than a tlog-tiles entry bundle holds (65535): read it at /api/v1/log/leaves/%d", first/tileWidth, e.Index, len(e.Raw), e.Index)
		}
		out = binary.BigEndian.AppendUint16(out, uint16(len(e.Raw)))
		out = append(out, e.Raw...)
	}
	return out, nil
}
