//! How the proxy names a request's class: by header, by path prefix, or by
//! the listener it came in on. The name is borrowed, never copied; whether it
//! is a class at all is the pool's business (unknown names are unclassified).

use std::{borrow::Cow, str::FromStr};

use http::{HeaderName, Request};

use super::layer::Classify;

/// One way to find a class in a request (`--classify`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rule {
    /// `header:NAME`: the header's value is the class.
    Header(HeaderName),
    /// `path:/prefix=class,...`: the longest matching prefix names the class.
    Path(Vec<(String, String)>),
    /// `port`: the listener names the class (`--route`); other listeners' traffic is unclassified.
    Port,
}

/// A `--classify` rule that does not parse; the message says why.
#[derive(Debug, thiserror::Error)]
#[error("--classify {value:?}: {why} (expected header:NAME, path:/prefix=class,... or port)")]
pub struct RuleError {
    value: String,
    why: &'static str,
}

impl FromStr for Rule {
    type Err = RuleError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |why| RuleError { value: s.to_owned(), why };
        if s == "port" {
            return Ok(Rule::Port);
        }
        let (kind, arg) = s.split_once(':').ok_or_else(|| err("no kind"))?;
        match kind {
            "header" => HeaderName::from_str(arg).map(Rule::Header).map_err(|_| err("not a header name")),
            "path" => {
                let mut prefixes = Vec::new();
                for pair in arg.split(',') {
                    let (prefix, class) = pair.split_once('=').ok_or_else(|| err("a pair is not /prefix=class"))?;
                    if !prefix.starts_with('/') || class.is_empty() {
                        return Err(err("a prefix must start with / and name a class"));
                    }
                    prefixes.push((prefix.trim_end_matches('/').to_owned(), class.to_owned()));
                }
                // Longest first, so /api/admin wins over /api.
                prefixes.sort_by_key(|(prefix, _)| std::cmp::Reverse(prefix.len()));
                Ok(Rule::Path(prefixes))
            }
            _ => Err(err("unknown kind")),
        }
    }
}

/// What a listener classifies by.
#[derive(Clone, Debug)]
pub enum Classifier {
    /// Everything on this listener is this class (`--route`, egress or port mode).
    Fixed(Box<str>),
    /// The first rule that names a class wins.
    Rules(Vec<Rule>),
}

impl<B> Classify<B> for Classifier {
    fn classify<'r>(&'r self, req: &'r Request<B>) -> Option<Cow<'r, str>> {
        match self {
            Classifier::Fixed(class) => Some(Cow::Borrowed(class)),
            Classifier::Rules(rules) => rules.iter().find_map(|rule| by_rule(rule, req)).map(Cow::Borrowed),
        }
    }
}

fn by_rule<'r, B>(rule: &'r Rule, req: &'r Request<B>) -> Option<&'r str> {
    match rule {
        Rule::Header(name) => req.headers().get(name).and_then(|v| v.to_str().ok()),
        Rule::Path(prefixes) => {
            let path = req.uri().path();
            prefixes.iter().find(|(prefix, _)| segment_prefix(path, prefix)).map(|(_, class)| class.as_str())
        }
        Rule::Port => None,
    }
}

/// `/api` matches `/api`, `/api/x` and `/api;p/x` (servlet containers route
/// by the segment without its parameters), not `/apix`; the prefix `/`
/// (stored as "") matches all.
fn segment_prefix(path: &str, prefix: &str) -> bool {
    path.strip_prefix(prefix).is_some_and(|rest| rest.is_empty() || rest.starts_with('/') || rest.starts_with(';'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class<'a>(c: &'a Classifier, req: &'a Request<()>) -> Option<&'a str> {
        match Classify::<()>::classify(c, req) {
            Some(Cow::Borrowed(s)) => Some(s),
            Some(Cow::Owned(_)) => panic!("copied"),
            None => None,
        }
    }

    #[test]
    fn rules_parse_and_classify() {
        let header: Rule = "header:X-Bulkhead-Class".parse().expect("header rule");
        let path: Rule = "path:/api=search,/api/admin/=control-plane,/=reports".parse().expect("path rule");
        assert!("path:api=x".parse::<Rule>().is_err());
        assert!("cookie:x".parse::<Rule>().is_err());
        assert!("header:bad name".parse::<Rule>().is_err());
        let c = Classifier::Rules(vec![header, path]);
        let req = |uri: &str, h: Option<&str>| {
            let b = Request::builder().uri(uri);
            let b = if let Some(h) = h { b.header("x-bulkhead-class", h) } else { b };
            b.body(()).expect("request")
        };
        assert_eq!(class(&c, &req("/api/admin/x", Some("checkout"))), Some("checkout"), "header first");
        assert_eq!(class(&c, &req("/api/admin/x", None)), Some("control-plane"));
        assert_eq!(class(&c, &req("/api/x?q=1", None)), Some("search"));
        assert_eq!(class(&c, &req("/apix", None)), Some("reports"));
        assert_eq!(class(&c, &req("/api;jsessionid=1/x", None)), Some("search"), "a segment's parameters");
        let none = Classifier::Rules(vec!["header:x-c".parse().expect("rule"), Rule::Port]);
        assert_eq!(class(&none, &req("/", None)), None);
        assert_eq!(class(&Classifier::Fixed("search".into()), &req("/", None)), Some("search"));
    }
}
