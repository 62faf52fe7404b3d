package grammar

import "strings"

const (
	reDate     = `[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))`
	reTime     = `(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{1,9})?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])`
	reLabel    = `[A-Za-z0-9](?:[A-Za-z0-9-]{0,30}[A-Za-z0-9])?`
	reHost     = reLabel + `(?:\.` + reLabel + `){0,4}`
	reDomain   = reLabel + `(?:\.` + reLabel + `){0,3}\.[A-Za-z]{2,12}`
	reLocal    = `[A-Za-z0-9_+-]{1,20}(?:\.[A-Za-z0-9_+-]{1,20}){0,2}`
	reOctet    = `(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])`
	reH16      = `[0-9a-fA-F]{1,4}`
	rePathChar = `[A-Za-z0-9._~!$&'()*+,;=:@-]`
)

var reIPv6 = strings.NewReplacer("h", reH16).Replace(`(?:(?:h:){7}h|(?:h:){1,7}:|(?:h:){1,6}:h|(?:h:){1,5}(?::h){1,2}|(?:h:){1,4}(?::h){1,3}|(?:h:){1,3}(?::h){1,4}|(?:h:){1,2}(?::h){1,5}|h:(?::h){1,6}|:(?:(?::h){1,7}|:))`)

// URIs follow RFC 3986's syntax (ASCII only, no IP literals): a
// percent-encoded byte is one pchar, the authority may be empty (file:///x)
// and carry user info and a port, and a URI may have no authority at all
// (urn:isbn:0451450523, mailto:a@b.c). A URI reference may be relative
// (path/to, /a?b#c, //host/x).
var (
	rePct       = `%[0-9A-Fa-f]{2}`
	rePChar     = `(?:` + rePathChar + `|` + rePct + `)`
	reAuthority = `(?:(?:[A-Za-z0-9._~!$&'()*+,;=:-]|` + rePct + `)*@)?(?:[A-Za-z0-9._~!$&'()*+,;=-]|` + rePct + `)*(?::[0-9]{1,5})?`
	reQueryFrag = `(?:\?(?:` + rePChar + `|[/?])*)?(?:#(?:` + rePChar + `|[/?])*)?`
	reURI       = `[A-Za-z][A-Za-z0-9+.-]*:(?://` + reAuthority + `(?:/` + rePChar + `*)*|/?(?:` + rePChar + `+(?:/` + rePChar + `*)*)?)` + reQueryFrag
	reRelative  = `(?://` + reAuthority + `(?:/` + rePChar + `*)*|/(?:` + rePChar + `+(?:/` + rePChar + `*)*)?|(?:[A-Za-z0-9._~!$&'()*+,;=@-]|` + rePct + `)+(?:/` + rePChar + `*)*|)` + reQueryFrag
)

// formatRegex returns an anchored regex for a format; ok=false means the
// format is not one validators assert, so it is an annotation.
func formatRegex(f string) (string, bool, error) {
	switch f {
	case "date":
		return "^" + reDate + "$", true, nil
	case "time":
		return "^" + reTime + "$", true, nil
	case "date-time":
		return "^" + reDate + "T" + reTime + "$", true, nil
	case "email":
		return "^" + reLocal + "@" + reDomain + "$", true, nil
	case "hostname":
		return "^" + reHost + "$", true, nil
	case "uuid":
		return `^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`, true, nil
	case "ipv4":
		return "^" + reOctet + `(?:\.` + reOctet + "){3}$", true, nil
	case "ipv6":
		return "^" + reIPv6 + "$", true, nil
	case "uri", "iri", "url":
		return "^" + reURI + "$", true, nil
	case "uri-reference", "iri-reference":
		return "^(?:" + reURI + "|" + reRelative + ")$", true, nil
	case "duration", "period", "json-pointer", "relative-json-pointer", "regex", "idn-hostname",
		"idn-email", "uri-template", "semver":
		return "", false, errf("format %q is not supported", f)
	}
	return "", false, nil
}
