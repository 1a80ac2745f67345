package history

// Consumer takes the ops of one pass over a history, so that one read of
// the file serves several analyses (checker.Options.Also): a run's
// verdict, its report's curves and its fault summary come from one scan.
type Consumer interface {
	// Begin is called with the history's header, before the first op.
	Begin(h Header)
	// Op is called for every op, in order; op is reused after it returns.
	Op(op *Op)
	// End is called after the last op with nil, or with the error of a
	// torn last line (errors.Is(err, ErrTruncated)).
	End(err error)
}
