//! Building HTML safely: every text and attribute value goes through [`esc`], every path
//! segment of a link through [`seg`]; sizes and times as people read them.
//!
//! [`Html`] is a string that only grows by escaped text ([`Html::text`]) or by markup
//! written in this crate ([`Html::raw`] takes `&'static str` only), so a name from the
//! store or the upstream cannot add markup: `raw` cannot be given one.

use std::fmt::Write as _;

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

/// Escapes text for an HTML text node or a quoted attribute value (`"` and `'` both).
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // Controls other than tab and newline have no business on a page.
            c if c.is_control() && c != '\t' && c != '\n' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// Bytes kept as they are in a path segment: RFC 3986's unreserved characters.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// A path segment, percent-encoded (`/`, `%`, `?`, `#`, quotes, spaces, non-ASCII too).
/// A segment that is `.` or `..` is encoded too, so no link walks up the path.
pub fn seg(s: &str) -> String {
    match s {
        "." => "%2E".into(),
        ".." => "%2E%2E".into(),
        _ => utf8_percent_encode(s, SEGMENT).to_string(),
    }
}

/// The link of a repository's page: its id as two segments (`org` and `name`, each
/// encoded), as the API's routes spell ids.
pub fn repo_href(repo: &str) -> String {
    match repo.split_once('/') {
        Some((org, name)) => format!("/ui/repos/{}/{}", seg(org), seg(name)),
        None => format!("/ui/repos/{}", seg(repo)),
    }
}

/// A page being written.
#[derive(Default)]
pub struct Html(String);

impl Html {
    /// Markup written in this crate (never data).
    pub fn raw(&mut self, s: &'static str) -> &mut Html {
        self.0.push_str(s);
        self
    }

    /// Text, escaped.
    pub fn text(&mut self, s: &str) -> &mut Html {
        self.0.push_str(&esc(s));
        self
    }

    /// `<tag attr="value">text</tag>` with the value and the text escaped.
    pub fn elem(&mut self, tag: &'static str, attrs: &[(&'static str, &str)], text: &str) {
        let _ = write!(self.0, "<{tag}");
        for (k, v) in attrs {
            let _ = write!(self.0, " {k}=\"{}\"", esc(v));
        }
        let _ = write!(self.0, ">{}</{tag}>", esc(text));
    }

    /// `<tag attr="value">`, a void element (`input`), the values escaped.
    pub fn void(&mut self, tag: &'static str, attrs: &[(&'static str, &str)]) {
        let _ = write!(self.0, "<{tag}");
        for (k, v) in attrs {
            let _ = write!(self.0, " {k}=\"{}\"", esc(v));
        }
        self.0.push('>');
    }

    /// A link to `href` (built by [`repo_href`] or from [`seg`]ments), text escaped.
    pub fn link(&mut self, href: &str, text: &str) {
        self.elem("a", &[("href", href)], text);
    }

    /// A size in binary units, the exact count of bytes on hover and in `data-bytes`.
    pub fn bytes(&mut self, n: u64) {
        let exact = format!("{n} bytes");
        let _ = write!(
            self.0,
            "<span class=\"num\" title=\"{exact}\" data-bytes=\"{n}\">{}</span>",
            human_bytes(n)
        );
    }

    /// A time relative to `now` (seconds since the epoch), the UTC time on hover and in
    /// `datetime`; `None` shows `never`.
    pub fn time(&mut self, at: Option<u64>, now: u64) {
        match at {
            None => {
                let _ = write!(self.0, "<span class=\"never\" data-epoch=\"\">never</span>");
            }
            Some(t) => {
                let utc = repo::manifest::utc_string(t);
                let _ = write!(
                    self.0,
                    "<time datetime=\"{utc}\" title=\"{utc}\" data-epoch=\"{t}\">{}</time>",
                    relative(t, now)
                );
            }
        }
    }

    /// A number as written (no unit).
    pub fn num(&mut self, n: u64) {
        let _ = write!(self.0, "<span class=\"num\" data-n=\"{n}\">{n}</span>");
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

/// `1.5 GiB`, `812 B`: binary units, three significant digits.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if v < 10.0 {
        format!("{v:.2} {}", UNITS[u])
    } else if v < 100.0 {
        format!("{v:.1} {}", UNITS[u])
    } else {
        format!("{v:.0} {}", UNITS[u])
    }
}

/// `just now`, `5 minutes ago`, `3 days ago`, `in 2 hours` (a clock ahead of ours).
pub fn relative(at: u64, now: u64) -> String {
    let (d, future) = if at > now {
        (at - now, true)
    } else {
        (now - at, false)
    };
    if d < 60 {
        return "just now".into();
    }
    let (n, unit) = match d {
        d if d < 3600 => (d / 60, "minute"),
        d if d < 86_400 => (d / 3600, "hour"),
        d if d < 60 * 86_400 => (d / 86_400, "day"),
        d if d < 730 * 86_400 => (d / (30 * 86_400), "month"),
        d => (d / (365 * 86_400), "year"),
    };
    let s = if n == 1 { "" } else { "s" };
    if future {
        format!("in {n} {unit}{s}")
    } else {
        format!("{n} {unit}{s} ago")
    }
}

/// The tags the pages write; a `<` on a page that opens any other came from data.
pub const PAGE_TAGS: &[&str] = &[
    "!doctype", "html", "head", "meta", "title", "style", "body", "header", "b", "a", "main", "h1",
    "h2", "p", "table", "thead", "tbody", "tr", "th", "td", "span", "time", "code", "pre", "form",
    "label", "input", "button", "footer", "details", "summary", "ul", "li",
];

/// The check the tests (unit, fuzz, browser) make of a rendered page: what on it is not
/// the pages' own markup, or `None`. Every `<` must open one of [`PAGE_TAGS`], and inside a
/// tag, outside its quoted values, no event handler and no `src=` (an attribute from data).
pub fn foreign_markup(page: &str) -> Option<String> {
    for (i, _) in page.match_indices('<') {
        let rest = page[i + 1..].trim_start_matches('/');
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '!')
            .collect();
        let tag = &page[i..i + page[i..].find('>').unwrap_or(page.len() - i)];
        if !PAGE_TAGS.contains(&name.as_str()) {
            return Some(format!("markup <{name} at {i}: {tag}"));
        }
        let outside: String = tag.split('"').step_by(2).collect();
        if outside.contains("onerror") || outside.contains("src=") {
            return Some(format!("an attribute from data at {i}: {tag}"));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_leaves_no_markup_and_no_way_out_of_an_attribute() {
        let hostile = "<script>alert(1)</script>\"' onmouseover=x &amp; \u{0}\u{1b}";
        let e = esc(hostile);
        for bad in ['<', '>', '"', '\'', '\u{0}', '\u{1b}'] {
            assert!(!e.contains(bad), "{bad:?} in {e}");
        }
        assert!(e.contains("&amp;amp;"), "{e}");
        assert_eq!(esc("a&b"), "a&amp;b");
        assert_eq!(esc("plain naïve ☃"), "plain naïve ☃");
        let mut h = Html::default();
        h.elem("a", &[("href", "x\" onclick=\"y")], "<b>");
        assert_eq!(
            h.into_string(),
            "<a href=\"x&quot; onclick=&quot;y\">&lt;b&gt;</a>"
        );
    }

    #[test]
    fn segments_keep_slashes_queries_and_dots_inside_the_segment() {
        assert_eq!(seg("org/name"), "org%2Fname");
        assert_eq!(seg("a b?c#d%e"), "a%20b%3Fc%23d%25e");
        assert_eq!(seg(".."), "%2E%2E");
        assert_eq!(seg("v1.0_x-y~z"), "v1.0_x-y~z");
        assert_eq!(seg("é\"<"), "%C3%A9%22%3C");
        assert_eq!(repo_href("Org/Model-1"), "/ui/repos/Org/Model-1");
        assert_eq!(repo_href("o/\"><x"), "/ui/repos/o/%22%3E%3Cx");
    }

    #[test]
    fn sizes_and_times_as_people_read_them() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1024), "1.00 KiB");
        assert_eq!(human_bytes(1536 * 1024 * 1024), "1.50 GiB");
        assert_eq!(human_bytes(150 * 1024 * 1024), "150 MiB");
        assert_eq!(human_bytes(u64::MAX), "16.0 EiB");
        assert_eq!(relative(100, 130), "just now");
        assert_eq!(relative(0, 60), "1 minute ago");
        assert_eq!(relative(0, 7200), "2 hours ago");
        assert_eq!(relative(0, 3 * 86_400), "3 days ago");
        assert_eq!(relative(0, 90 * 86_400), "3 months ago");
        assert_eq!(relative(0, 800 * 86_400), "2 years ago");
        assert_eq!(relative(7200, 0), "in 2 hours");
        assert_eq!(relative(u64::MAX, 0), "in 584942417355 years");
    }
}
