package history

// Consumer takes the ops of one pass over a history, so that one read of
// the file serves several analyses (checker.Options.Also): a run's
// verdict, its report's curves and its fault summary come from one scan.
type Consumer interface {
	// Start is called with the history's header, before the first op.
	Start(h Header)
	// Op is called for every op, in order; op is reused after it returns.
	Op(op *Op)
	// Finish is called after the last op with nil, or with the error of
	// a torn last line (errors.Is(err, ErrTruncated)).
	Finish(err error)
}
