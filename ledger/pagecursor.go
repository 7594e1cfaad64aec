package ledger

import "github.com/evidence-ledger/ledger/ledger/internal/cursor"

// PageCursor returns the opaque cursor of a listing that continues below
// log index (newest first): the Next value a store would hand out after an
// entry at index. A server that cuts a page short (a byte budget) uses it
// to hand out the rest; it is the one encoding every driver reads.
func PageCursor(index uint64) string { return cursor.Encode(index) }
