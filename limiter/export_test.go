package limiter

// GeneralScript makes a limiter decide every plan with the general
// decision script (decideBody), so that tests can compare it with the
// common plan's flat one (fastBody).
func GeneralScript(o Options) Options {
	o.generalScript = true
	return o
}

// RefShapes returns how many shapes of decisions by reference l keeps.
func RefShapes(l *Limiter) int {
	if m := l.refShapes.Load(); m != nil {
		return len(*m)
	}
	return 0
}
