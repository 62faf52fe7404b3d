package chat

// Statement nodes. The evaluator switches on the concrete types.
type (
	stmt any

	textStmt   struct{ text string }
	outputStmt struct{ x expr }
	ifStmt     struct {
		conds    []expr
		bodies   [][]stmt
		elseBody []stmt
	}
	forStmt struct {
		target   assignTarget
		iter     expr
		cond     expr // `for x in xs if cond`, nil when absent
		body     []stmt
		elseBody []stmt
	}
	setStmt struct {
		target assignTarget
		value  expr
	}
	// setBlockStmt is `{% set x | filters %}body{% endset %}`.
	setBlockStmt struct {
		target  assignTarget
		body    []stmt
		filters []*filterExpr // applied in order to the captured text
	}
	macroStmt struct{ m *macroDef }
	withStmt  struct {
		targets []assignTarget
		values  []expr
		body    []stmt
	}
	breakStmt    struct{}
	continueStmt struct{}
)

// assignTarget is a name, a tuple of names, or a namespace attribute.
type assignTarget struct {
	names  []string
	tuple  bool
	nsAttr string // when set, names[0] is the namespace and this its attribute
}

type macroDef struct {
	name     string
	params   []string
	defaults []expr // defaults[i] for params[i], nil when required
	body     []stmt
}

// Expression nodes.
type (
	expr any

	constExpr struct{ val any }
	nameExpr  struct{ name string }
	attrExpr  struct {
		obj  expr
		name string
	}
	itemExpr  struct{ obj, key expr }
	sliceExpr struct{ obj, start, stop, step expr }
	callExpr  struct {
		fn      expr
		args    []expr
		kwNames []string
		kwVals  []expr
	}
	filterExpr struct {
		arg     expr // nil for the filters of a set block
		name    string
		fn      filterFunc
		args    []expr
		kwNames []string
		kwVals  []expr
	}
	testExpr struct {
		arg    expr
		name   string
		fn     testFunc
		args   []expr
		negate bool
	}
	notExpr struct{ x expr }
	negExpr struct{ x expr }
	posExpr struct{ x expr }
	binExpr struct {
		op   string // + - * / // % **
		l, r expr
	}
	andExpr     struct{ l, r expr }
	orExpr      struct{ l, r expr }
	concatExpr  struct{ parts []expr }
	compareExpr struct {
		first expr
		ops   []string // == != < <= > >= in notin
		rest  []expr
	}
	condExpr  struct{ cond, then, els expr } // els nil: undefined
	listExpr  struct{ items []expr }
	tupleExpr struct{ items []expr }
	dictExpr  struct{ keys, vals []expr }
)
