package ledger

// WitnessedLog is what a store that runs witnesses also answers: the
// newest checkpoint whose cosignatures met the witness policy's quorum
// (ok false when none has). A checkpoint of a smaller size is covered by
// it (the witnessed one commits to its whole prefix). Implementations are
// safe for concurrent use.
type WitnessedLog interface {
	LastWitnessed() (size uint64, root Hash, ok bool)
}
