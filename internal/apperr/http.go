package apperr

import "net/http"

// HTTP is how an error of one code answers over HTTP, for the JSON API
// (problem+json type slug and title) and for the console's pages (the
// heading a person reads).
type HTTP struct {
	Status  int
	Slug    string // problem type: ProblemBase + Slug
	Title   string // problem title
	Heading string // console page heading
}

// httpOf is the one table from codes to statuses; httpapi and web both read
// it, so the API and the console never answer the same error differently.
var httpOf = map[Code]HTTP{
	Invalid:       {http.StatusBadRequest, "invalid-request", "Invalid request", "That did not work"},
	Unauthorized:  {http.StatusUnauthorized, "unauthorized", "Unauthorized", "Not allowed"},
	NotFound:      {http.StatusNotFound, "not-found", "Not found", "Not found"},
	Conflict:      {http.StatusConflict, "conflict", "Conflict", "Conflict"},
	Unprocessable: {http.StatusUnprocessableEntity, "unprocessable", "Unprocessable request", "That was refused"},
	TooLarge:      {http.StatusRequestEntityTooLarge, "too-large", "Request body too large", "Too large"},
	Unavailable:   {http.StatusServiceUnavailable, "unavailable", "Service unavailable", "Try again shortly"},
	Upstream:      {http.StatusBadGateway, "upstream", "Upstream error", "Stripe refused the change"},
}

// HTTPOf is code's row of the table; an unknown code answers as Invalid
// (a classified error is the client's to fix, never a 500).
func HTTPOf(code Code) HTTP {
	if h, ok := httpOf[code]; ok {
		return h
	}
	return httpOf[Invalid]
}
