package postgres

import (
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// rowBuf buffers rows of one table and writes them with multi-row
// INSERTs of at most maxRows rows.
type rowBuf struct {
	head string // "INSERT INTO t(a, b) VALUES "
	ncol int
	args []any
}

// maxRows keeps a statement under PostgreSQL's 65535 bind parameters.
const maxRows = 1000

func newRowBuf(table, cols string, ncol int) *rowBuf {
	return &rowBuf{head: "INSERT INTO " + table + "(" + cols + ") VALUES ", ncol: ncol}
}

func (r *rowBuf) add(vals ...any) { r.args = append(r.args, vals...) }

func (r *rowBuf) query(n int) string {
	var sb strings.Builder
	sb.WriteString(r.head)
	p := 1
	for i := range n {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteByte('(')
		for c := range r.ncol {
			if c > 0 {
				sb.WriteByte(',')
			}
			sb.WriteByte('$')
			sb.WriteString(strconv.Itoa(p))
			p++
		}
		sb.WriteByte(')')
	}
	return sb.String()
}

// queue adds the INSERTs of the buffered rows to q; the rows stay
// buffered (reset clears them).
func (r *rowBuf) queue(q *pgx.Batch) { r.queueRows(q, len(r.args)/r.ncol) }

// queueRows adds the INSERTs of the first n buffered rows to q.
func (r *rowBuf) queueRows(q *pgx.Batch, n int) {
	for lo := 0; lo < n; lo += maxRows {
		k := min(maxRows, n-lo)
		q.Queue(r.query(k), r.args[lo*r.ncol:(lo+k)*r.ncol]...)
	}
}
