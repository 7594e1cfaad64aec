package main

import (
	"database/sql"
	"fmt"
	"os"
	"strconv"

	_ "modernc.org/sqlite"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: tamper DB INDEX")
		os.Exit(2)
	}
	idx, err := strconv.Atoi(os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, "tamper: bad index:", err)
		os.Exit(2)
	}
	db, err := sql.Open("sqlite", "file:"+os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "tamper:", err)
		os.Exit(2)
	}
	defer db.Close()
	var leaf []byte
	if err := db.QueryRow("SELECT leaf FROM leaves WHERE idx = ?", idx).Scan(&leaf); err != nil {
		fmt.Fprintln(os.Stderr, "tamper: read leaf:", err)
		os.Exit(2)
	}
	// Flip one bit of a byte in the middle of the body.
	leaf[len(leaf)/2] ^= 0x01
	if _, err := db.Exec("UPDATE leaves SET leaf = ? WHERE idx = ?", leaf, idx); err != nil {
		fmt.Fprintln(os.Stderr, "tamper: write leaf:", err)
		os.Exit(2)
	}
	fmt.Printf("flipped one bit of leaf %d\n", idx)
}
