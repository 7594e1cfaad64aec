package web

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/storetest"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// tilesClient reads a log through its tlog-tiles routes for
// golang.org/x/mod/sumdb/tlog (a tiles client independent of this
// repository): tlog names tiles tile/8/L/N, tlog-tiles tile/L/N.
type tilesClient struct {
	t     *testing.T
	base  string
	cache map[string][]byte
	gets  int
}

func (c *tilesClient) get(path string) (int, http.Header, []byte) {
	c.t.Helper()
	resp, err := http.Get(c.base + "/" + path)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	c.gets++
	return resp.StatusCode, resp.Header, b
}

func (c *tilesClient) Height() int { return 8 }

func (c *tilesClient) ReadTiles(tiles []tlog.Tile) ([][]byte, error) {
	out := make([][]byte, len(tiles))
	for i, tl := range tiles {
		path := "tile/" + strings.TrimPrefix(tl.Path(), "tile/8/")
		if b, ok := c.cache[path]; ok {
			out[i] = b
			continue
		}
		code, hdr, b := c.get(path)
		if code != http.StatusOK {
			return nil, fmt.Errorf("%s: %d %s", path, code, b)
		}
		cc := hdr.Get("Cache-Control")
		if full := tl.W == 256; full != strings.Contains(cc, "immutable") {
			return nil, fmt.Errorf("%s (width %d): Cache-Control %q", path, tl.W, cc)
		}
		c.cache[path] = b
		out[i] = b
	}
	return out, nil
}

func (c *tilesClient) SaveTiles([]tlog.Tile, [][]byte) {}

// TestTilesWholeLog reads a log of 700 leaves (two full entry bundles and
// a partial one; level-0 full and partial hash tiles; a partial level-1
// tile) through /checkpoint and /tile/... with x/mod's tlog: the signed
// checkpoint verifies, the tree hash of the tiles is its root, every
// entry's SHA-256(0x00||bytes) is proved included under that root, and
// every entry is the stored leaf.
func TestTilesWholeLog(t *testing.T) {
	e := newAPIEnv(t, Config{})
	ctx := context.Background()
	for lo := 0; lo < 700; lo += 70 {
		var recs []ledger.Record
		for i := lo; i < lo+70; i++ {
			b, _ := json.Marshal(storetest.Evidence(i))
			recs = append(recs, ledger.Record{Kind: ledger.KindEvidence, Body: b})
		}
		if _, err := e.store.Append(ctx, recs, ""); err != nil {
			t.Fatal(err)
		}
	}
	c := &tilesClient{t: t, base: e.srv.URL, cache: map[string][]byte{}}
	code, hdr, cpNote := c.get("checkpoint")
	if code != http.StatusOK || !strings.HasPrefix(hdr.Get("Content-Type"), "text/plain") {
		t.Fatalf("checkpoint: %d %s", code, hdr.Get("Content-Type"))
	}
	v, err := note.NewVerifier(e.store.VerifierKey())
	if err != nil {
		t.Fatal(err)
	}
	n, err := note.Open(cpNote, note.VerifierList(v))
	if err != nil {
		t.Fatalf("checkpoint note: %v", err)
	}
	lines := strings.Split(n.Text, "\n")
	size, _ := strconv.ParseInt(lines[1], 10, 64)
	rootB, _ := base64.StdEncoding.DecodeString(lines[2])
	var root tlog.Hash
	copy(root[:], rootB)
	if latest, err := e.store.Checkpoint(ctx); err != nil || size != int64(latest.Size) || size < 700 {
		t.Fatalf("checkpoint size %d, log %d (%v)", size, latest.Size, err)
	}
	tree := tlog.Tree{N: size, Hash: root}
	th := tlog.TileHashReader(tree, c)
	if h, err := tlog.TreeHash(size, th); err != nil || h != root {
		t.Fatalf("tree hash from tiles: %v %v, want %v", h, err, root)
	}
	var idx int64
	for b := int64(0); b*256 < size; b++ {
		w := min(256, size-b*256)
		path := "tile/entries/" + strings.TrimPrefix(tlog.Tile{H: 8, L: 0, N: b, W: int(w)}.Path(), "tile/8/0/")
		code, hdr, bundle := c.get(path)
		if code != http.StatusOK {
			t.Fatalf("%s: %d %s", path, code, bundle)
		}
		if cc := hdr.Get("Cache-Control"); (w == 256) != strings.Contains(cc, "immutable") {
			t.Fatalf("%s: Cache-Control %q", path, cc)
		}
		for k := int64(0); k < w; k++ {
			if len(bundle) < 2 {
				t.Fatalf("%s: bundle ends after %d entries", path, k)
			}
			l := int(binary.BigEndian.Uint16(bundle))
			data := bundle[2 : 2+l]
			bundle = bundle[2+l:]
			p, err := tlog.ProveRecord(size, idx, th)
			if err != nil {
				t.Fatalf("prove %d: %v", idx, err)
			}
			if err := tlog.CheckRecord(p, size, root, idx, tlog.RecordHash(data)); err != nil {
				t.Fatalf("entry %d is not the leaf the tiles prove: %v", idx, err)
			}
			st, err := e.store.EntryAt(ctx, uint64(idx))
			if err != nil || string(st.Raw) != string(data) {
				t.Fatalf("entry %d differs from the stored leaf", idx)
			}
			idx++
		}
		if len(bundle) != 0 {
			t.Fatalf("%s: %d bytes after %d entries", path, len(bundle), w)
		}
	}
	if idx != size {
		t.Fatalf("read %d entries of %d", idx, size)
	}
	t.Logf("%d leaves read and proved through %d tile requests", size, c.gets)

	// Beyond the checkpoint, and malformed paths: 404.
	for _, p := range []string{"tile/0/003", "tile/1/000", "tile/entries/002.p/255", "tile/0/3", "tile/0/000.p/0", "tile/0/000.p/256", "tile/9/000", "tile/0/x000", "tile/-1/000", "tile/entries/x001/002"} {
		if code, _, b := c.get(p); code != http.StatusNotFound {
			t.Errorf("%s: %d %s, want 404", p, code, b)
		}
	}
}
