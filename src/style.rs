//! Colour on a terminal, as Terraform gives it: green for what is created, red for what is
//! retired, the template diff in both. `--color auto|always|never`; `NO_COLOR` (no-color.org)
//! turns it off unless `--color always` asks for it. And [`count`], so that one thing is never
//! "1 things".

use std::io::IsTerminal;

/// `n` of `noun`, in the plural unless one: `1 step`, `3 steps`.
pub fn count(n: usize, noun: &str) -> String {
    if n == 1 { format!("1 {noun}") } else { format!("{n} {noun}s") }
}

/// `--color`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorChoice {
    /// Colour when the output is a terminal and `NO_COLOR` is not set.
    #[default]
    Auto,
    Always,
    Never,
}

impl ColorChoice {
    /// Whether to colour an output that is (or is not) a terminal, with `no_color` the value of
    /// `NO_COLOR`, if set (set and not empty turns colour off, as no-color.org says).
    pub fn colors(self, is_terminal: bool, no_color: Option<&str>) -> bool {
        match self {
            Self::Always => true,
            Self::Never => false,
            Self::Auto => is_terminal && no_color.is_none_or(str::is_empty),
        }
    }

    /// The style of stdout under this choice and the environment.
    pub fn stdout(self) -> Style {
        let no_color = std::env::var("NO_COLOR").ok();
        Style { color: self.colors(std::io::stdout().is_terminal(), no_color.as_deref()) }
    }

    /// Whether stderr gets colour (the logs).
    pub fn stderr(self) -> bool {
        let no_color = std::env::var("NO_COLOR").ok();
        self.colors(std::io::stderr().is_terminal(), no_color.as_deref())
    }
}

/// How text is painted: with ANSI colours, or as it is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Style {
    pub color: bool,
}

impl Style {
    /// No colour at all.
    pub const PLAIN: Self = Self { color: false };

    fn paint(self, code: &str, text: &str) -> String {
        if self.color && !text.is_empty() { format!("\x1b[{code}m{text}\x1b[0m") } else { text.to_owned() }
    }
    pub fn green(self, text: &str) -> String {
        self.paint("32", text)
    }
    pub fn red(self, text: &str) -> String {
        self.paint("31", text)
    }
    pub fn yellow(self, text: &str) -> String {
        self.paint("33", text)
    }
    pub fn cyan(self, text: &str) -> String {
        self.paint("36", text)
    }
    pub fn bold(self, text: &str) -> String {
        self.paint("1", text)
    }
    pub fn dim(self, text: &str) -> String {
        self.paint("2", text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_colours_a_terminal_unless_no_color_is_set_and_not_empty() {
        assert!(ColorChoice::Auto.colors(true, None));
        assert!(ColorChoice::Auto.colors(true, Some("")), "an empty NO_COLOR is not set");
        assert!(!ColorChoice::Auto.colors(true, Some("1")));
        assert!(!ColorChoice::Auto.colors(false, None));
        assert!(ColorChoice::Always.colors(false, Some("1")), "--color always wins");
        assert!(!ColorChoice::Never.colors(true, None));
    }

    #[test]
    fn plain_text_stays_as_it_is() {
        assert_eq!(Style::PLAIN.green("create"), "create");
        assert_eq!(Style { color: true }.green("create"), "\x1b[32mcreate\x1b[0m");
        assert_eq!(Style { color: true }.red(""), "", "nothing to paint");
    }
}
