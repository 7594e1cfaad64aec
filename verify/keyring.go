package verify

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
)

// LoadKeyring reads OpenPGP public keys from a file, armoured or binary
// (a gpg --export keyring), as ParseKeyring does; warnings about skipped
// blocks are dropped (LoadKeyringWarn returns them). Several files may be
// concatenated by the caller with append.
func LoadKeyring(path string) (openpgp.EntityList, error) {
	el, _, err := LoadKeyringWarn(path)
	return el, err
}

// LoadKeyringWarn is LoadKeyring returning the warnings of
// ParseKeyringWarn. A file that cannot be read is an error.
func LoadKeyringWarn(path string) (openpgp.EntityList, []string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read keyring: %w", err)
	}
	return ParseKeyringWarn(b)
}

// ParseKeyring parses armoured or binary OpenPGP public keys; see
// ParseKeyringWarn.
func ParseKeyring(b []byte) (openpgp.EntityList, error) {
	el, _, err := ParseKeyringWarn(b)
	return el, err
}

// ParseKeyringWarn reads keys the way gpg --import does: every usable key
// (public or secret) of every armoured block in the file, or of the whole
// binary file, in order. What is not a usable key is skipped with a
// warning naming the block (its number and armour type) and the reason:
// a block of another type (a signature, a message), a lone revocation
// certificate or other packets outside a key, a key go-crypto cannot
// read, a block whose armour or checksum is broken. It is an ErrMalformed
// error when nothing usable remains; the error and warnings never quote
// the file's bytes.
func ParseKeyringWarn(b []byte) (openpgp.EntityList, []string, error) {
	var el openpgp.EntityList
	var warns []string
	if !bytes.Contains(b, []byte("-----BEGIN PGP ")) {
		el, warns = readEntities(bytes.NewReader(b), "binary keyring")
	} else {
		for i, chunk := range armourChunks(b) {
			name := fmt.Sprintf("block %d", i+1)
			blk, err := armor.Decode(bytes.NewReader(chunk))
			if err != nil {
				warns = append(warns, fmt.Sprintf("%s: armour unreadable (%v): skipped", name, err))
				continue
			}
			name += " (" + blk.Type + ")"
			if blk.Type != openpgp.PublicKeyType && blk.Type != openpgp.PrivateKeyType {
				warns = append(warns, name+": not a key block: skipped")
				continue
			}
			part, w := readEntities(blk.Body, name)
			el, warns = append(el, part...), append(warns, w...)
		}
	}
	if len(el) == 0 {
		msg := "keyring holds no usable keys"
		if len(warns) > 0 {
			msg += ": " + strings.Join(warns, "; ")
		}
		return nil, warns, newErr(ErrMalformed, "%s", msg)
	}
	return el, warns, nil
}

// armourChunks splits b at each line starting with "-----BEGIN PGP ".
func armourChunks(b []byte) [][]byte {
	var starts []int
	for off := 0; off < len(b); {
		if bytes.HasPrefix(b[off:], []byte("-----BEGIN PGP ")) {
			starts = append(starts, off)
		}
		nl := bytes.IndexByte(b[off:], '\n')
		if nl < 0 {
			break
		}
		off += nl + 1
	}
	out := make([][]byte, len(starts))
	for i, s := range starts {
		end := len(b)
		if i+1 < len(starts) {
			end = starts[i+1]
		}
		out[i] = b[s:end]
	}
	return out
}

// readEntities reads every entity of a packet stream, as gpg --import
// does: packets before a primary key (a lone revocation certificate, a
// signature) are skipped with a warning; a key go-crypto refuses whole for
// a signature of the wrong class under a subkey or user id is read again
// without those signatures, which gpg ignores; a key still unreadable is
// skipped with a warning.
func readEntities(r io.Reader, name string) (openpgp.EntityList, []string) {
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, []string{fmt.Sprintf("%s: unreadable (%v): skipped", name, err)}
	}
	pkts, err := splitPackets(b)
	var warns []string
	if err != nil {
		warns = append(warns, fmt.Sprintf("%s: %v: the rest of the block skipped", name, err))
	}
	var el openpgp.EntityList
	n := 0
	for i := 0; i < len(pkts); {
		if !pkts[i].primary() {
			warns = append(warns, fmt.Sprintf("%s: %s outside a key (a lone revocation certificate or signature): skipped", name, pkts[i].describe(b)))
			i++
			continue
		}
		j := i + 1
		for j < len(pkts) && !pkts[j].primary() {
			j++
		}
		n++
		e, err := readOneEntity(b, pkts[i:j], false)
		if err != nil {
			if e2, err2 := readOneEntity(b, pkts[i:j], true); err2 == nil {
				e, err = e2, nil
			}
		}
		if err != nil {
			warns = append(warns, fmt.Sprintf("%s: key %d unusable (%v): skipped", name, n, err))
		} else {
			el = append(el, e)
		}
		i = j
	}
	return el, warns
}

// rawPacket is one OpenPGP packet's span in a byte stream (RFC 4880 4.2).
type rawPacket struct {
	tag              byte
	start, body, end int
}

func (p rawPacket) primary() bool { return p.tag == 6 || p.tag == 5 }

// sigClass returns the signature class of a signature packet (v3: the
// third body byte; v4 and later: the second), or -1.
func (p rawPacket) sigClass(b []byte) int {
	body := b[p.body:p.end]
	if p.tag != 2 || len(body) < 3 {
		return -1
	}
	if body[0] == 3 {
		return int(body[2])
	}
	return int(body[1])
}

func (p rawPacket) describe(b []byte) string {
	switch p.sigClass(b) {
	case 0x20:
		return "key revocation signature"
	case 0x30:
		return "certification revocation signature"
	case -1:
		return fmt.Sprintf("packet of tag %d", p.tag)
	}
	return "signature packet"
}

// splitPackets frames b into packets; partial lengths are not used in
// transferable keys and end the framing with an error.
func splitPackets(b []byte) ([]rawPacket, error) {
	var out []rawPacket
	for off := 0; off < len(b); {
		h := b[off]
		if h&0x80 == 0 {
			return out, fmt.Errorf("byte %d is not a packet header", off)
		}
		var tag byte
		var n, hl int
		if h&0x40 != 0 {
			tag = h & 0x3f
			if off+1 >= len(b) {
				return out, fmt.Errorf("truncated packet header at byte %d", off)
			}
			switch l := b[off+1]; {
			case l < 192:
				n, hl = int(l), 2
			case l < 224 && off+2 < len(b):
				n, hl = (int(l)-192)<<8+int(b[off+2])+192, 3
			case l == 255 && off+5 < len(b):
				n, hl = int(b[off+2])<<24|int(b[off+3])<<16|int(b[off+4])<<8|int(b[off+5]), 6
			default:
				return out, fmt.Errorf("unsupported packet length at byte %d", off)
			}
		} else {
			tag = (h >> 2) & 0x0f
			switch h & 3 {
			case 0:
				if off+1 < len(b) {
					n, hl = int(b[off+1]), 2
				}
			case 1:
				if off+2 < len(b) {
					n, hl = int(b[off+1])<<8|int(b[off+2]), 3
				}
			case 2:
				if off+4 < len(b) {
					n, hl = int(b[off+1])<<24|int(b[off+2])<<16|int(b[off+3])<<8|int(b[off+4]), 5
				}
			case 3:
				n, hl = len(b)-off-1, 1
			}
			if hl == 0 {
				return out, fmt.Errorf("truncated packet header at byte %d", off)
			}
		}
		if n < 0 || off+hl+n > len(b) {
			return out, fmt.Errorf("packet at byte %d runs past the end", off)
		}
		out = append(out, rawPacket{tag: tag, start: off, body: off + hl, end: off + hl + n})
		off += hl + n
	}
	return out, nil
}

// readOneEntity parses one key's packets; with filter, it first drops the
// signatures that go-crypto refuses and gpg ignores: under a subkey any
// class but binding (0x18) and subkey revocation (0x28), under a user id
// any class but certifications (0x10-0x13) and their revocation (0x30).
func readOneEntity(b []byte, pkts []rawPacket, filter bool) (*openpgp.Entity, error) {
	var buf bytes.Buffer
	var under byte // tag of the last non-signature packet
	for _, p := range pkts {
		if p.tag != 2 {
			under = p.tag
		} else if filter {
			c := p.sigClass(b)
			switch under {
			case 14, 7:
				if c != 0x18 && c != 0x28 {
					continue
				}
			case 13, 17:
				if !(c >= 0x10 && c <= 0x13) && c != 0x30 {
					continue
				}
			}
		}
		buf.Write(b[p.start:p.end])
	}
	return openpgp.ReadEntity(packet.NewReader(&buf))
}
