//! Splitting one script line into words: whitespace separates words, `"..."` quotes (with
//! `\"` and `\\` inside), `#` at the start of a word begins a comment, and `$NAME` or
//! `${NAME}` is replaced by a variable's value (inside quotes too; `$$` is a literal `$`).

use std::collections::BTreeMap;

/// The variables a script has set, by name.
pub type Variables = BTreeMap<String, String>;

/// Why a line could not be split.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct LexError(pub String);

/// The words of `line`, variables expanded; an empty vector for a blank or comment line.
pub fn words(line: &str, vars: &Variables) -> Result<Vec<String>, LexError> {
    let mut out = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        match chars.peek() {
            None | Some('#') => return Ok(out),
            Some(_) => {}
        }
        let mut word = String::new();
        while let Some(&c) = chars.peek() {
            if c.is_whitespace() {
                break;
            }
            chars.next();
            match c {
                '"' => quoted(&mut chars, &mut word, vars)?,
                '$' => expand(&mut chars, &mut word, vars)?,
                _ => word.push(c),
            }
        }
        out.push(word);
    }
}

type Chars<'a> = std::iter::Peekable<std::str::Chars<'a>>;

/// The rest of a quoted part, after its opening `"`.
fn quoted(chars: &mut Chars<'_>, word: &mut String, vars: &Variables) -> Result<(), LexError> {
    while let Some(c) = chars.next() {
        match c {
            '"' => return Ok(()),
            '\\' => match chars.next() {
                Some(e @ ('"' | '\\' | '$')) => word.push(e),
                Some(e) => {
                    return Err(LexError(format!(
                        "unknown escape \\{e} in quotes (only \\\", \\\\ and \\$)"
                    )))
                }
                None => break,
            },
            '$' => expand(chars, word, vars)?,
            _ => word.push(c),
        }
    }
    Err(LexError("unterminated quote".into()))
}

/// A variable reference, after its `$`.
fn expand(chars: &mut Chars<'_>, word: &mut String, vars: &Variables) -> Result<(), LexError> {
    if chars.next_if_eq(&'$').is_some() {
        word.push('$');
        return Ok(());
    }
    let braced = chars.next_if_eq(&'{').is_some();
    let mut name = String::new();
    while let Some(c) = chars.next_if(|c| is_name_char(*c)) {
        name.push(c);
    }
    if braced && chars.next_if_eq(&'}').is_none() {
        return Err(LexError("unterminated ${...}".into()));
    }
    if name.is_empty() {
        return Err(LexError(
            "$ without a variable name (write $$ for a dollar sign)".into(),
        ));
    }
    match vars.get(&name) {
        Some(v) => {
            word.push_str(v);
            Ok(())
        }
        None => Err(LexError(format!(
            "variable ${name} is not set (set it with `set {name} VALUE` or --set {name}=VALUE)"
        ))),
    }
}

/// Whether `c` may appear in a variable name.
pub fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> Variables {
        [("url".to_owned(), "iscsi://h/iqn.x/0".to_owned())].into()
    }

    #[test]
    fn words_quotes_comments_and_variables() {
        let v = vars();
        assert_eq!(
            words("  connect $url  ImmediateData=No # trailing", &v).unwrap(),
            ["connect", "iscsi://h/iqn.x/0", "ImmediateData=No"]
        );
        assert_eq!(
            words(r#"echo "a b" x${url}y "q\"\\\$" $$5"#, &v).unwrap(),
            ["echo", "a b", "xiscsi://h/iqn.x/0y", "q\"\\$", "$5"]
        );
        assert_eq!(
            words("   # only a comment", &v).unwrap(),
            Vec::<String>::new()
        );
        assert_eq!(words("echo a#b", &v).unwrap(), ["echo", "a#b"]);
        assert_eq!(words("", &v).unwrap(), Vec::<String>::new());
    }

    #[test]
    fn errors_say_what_is_wrong() {
        let v = vars();
        for (line, needle) in [
            ("echo \"open", "unterminated quote"),
            ("echo $nope", "$nope is not set"),
            ("echo ${url", "unterminated"),
            ("echo $", "without a variable name"),
            ("echo \"\\n\"", "unknown escape"),
        ] {
            let e = words(line, &v).unwrap_err();
            assert!(e.0.contains(needle), "{line}: {e:?}");
        }
    }
}
