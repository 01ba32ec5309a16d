//! Writing what a user reads: lines on standard output, tables, lists in words.

use std::io::Write;

/// Writes one line to standard output, like `println!`, but never panics: when the
/// reader has gone (`tidepool train | head`) the process ends quietly, as a
/// pipeline expects; another failure to write (a full disk) ends it with status 1.
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::cli::output::line(format_args!($($arg)*))
    };
}
pub(crate) use say;

pub fn line(text: std::fmt::Arguments) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = writeln!(out, "{text}").and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: cannot write to standard output: {e}");
        std::process::exit(1);
    }
}

/// Prints `rows` as JSON lines, or as an aligned table under `header`.
pub fn rows<T: serde::Serialize>(
    rows: &[T],
    json: bool,
    header: &[&str],
    cells: impl Fn(&T) -> Vec<String>,
) {
    if json {
        for row in rows {
            say!("{}", serde_json::to_string(row).expect("rows serialize"));
        }
        return;
    }
    let body: Vec<Vec<String>> = rows.iter().map(&cells).collect();
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            body.iter()
                .map(|r| r[i].len())
                .chain([header[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: Vec<String>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:>w$}"))
            .collect();
        say!("| {} |", padded.join(" | "));
    };
    line(header.iter().map(|h| h.to_string()).collect());
    let rule: Vec<String> = widths
        .iter()
        .map(|w| format!("{}:", "-".repeat(w + 1)))
        .collect();
    say!("|{}|", rule.join("|"));
    for row in body {
        line(row);
    }
}

/// `["1", "4", "9"]` -> `"1, 4 and 9"`: a list as a sentence says it.
pub fn in_words<T: std::fmt::Display>(items: &[T]) -> String {
    match items {
        [] => String::new(),
        [one] => one.to_string(),
        [rest @ .., last] => {
            let rest: Vec<String> = rest.iter().map(T::to_string).collect();
            format!("{} and {last}", rest.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn lists_read_as_words() {
        assert_eq!(super::in_words::<u32>(&[]), "");
        assert_eq!(super::in_words(&[1]), "1");
        assert_eq!(super::in_words(&[1, 4]), "1 and 4");
        assert_eq!(super::in_words(&["a", "b", "c"]), "a, b and c");
    }
}
