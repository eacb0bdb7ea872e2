//! Reading the console's input: lines from standard input without
//! blocking the job output, and words split as stock's acav does
//! (whitespace separates, '...' and "..." quote, \ escapes one character,
//! # starts a comment).

use std::io;
use std::time::Duration;

/// Splits `s` into words; Err(quote) for an unmatched quote.
pub fn split(s: &str) -> Result<Vec<String>, char> {
    let mut out = Vec::new();
    let mut chars = s.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        match chars.peek() {
            None | Some('#') => return Ok(out),
            _ => {}
        }
        let mut w = String::new();
        let mut mode: Option<char> = None;
        for c in chars.by_ref() {
            match mode {
                Some('\\') => {
                    w.push(c);
                    mode = None;
                }
                Some(q) if q == c => mode = None,
                Some(_) => w.push(c),
                None if c.is_whitespace() => break,
                None if matches!(c, '"' | '\'' | '\\') => mode = Some(c),
                None => w.push(c),
            }
        }
        if let Some(q) = mode {
            return Err(q);
        }
        out.push(w);
    }
}

/// Lines from standard input, waiting at most a given time for each.
#[derive(Default)]
pub struct LineReader {
    buf: Vec<u8>,
    eof: bool,
}

impl LineReader {
    /// The next line (without its newline); Ok(None) if none came within
    /// `wait`; Err at end of input.
    pub fn next_line(&mut self, wait: Duration) -> io::Result<Option<String>> {
        loop {
            if let Some(i) = self.buf.iter().position(|&c| c == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                return Ok(Some(String::from_utf8_lossy(&line[..i]).into_owned()));
            }
            if self.eof {
                if self.buf.is_empty() {
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
                let line = std::mem::take(&mut self.buf);
                return Ok(Some(String::from_utf8_lossy(&line).into_owned()));
            }
            let mut p = libc::pollfd {
                fd: super::stdin_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            let n = unsafe { libc::poll(&mut p, 1, wait.as_millis() as i32) };
            if n == 0 {
                return Ok(None);
            }
            let mut chunk = [0u8; 4096];
            // SAFETY: reading into our own buffer of its length.
            let got =
                unsafe { libc::read(super::stdin_fd(), chunk.as_mut_ptr().cast(), chunk.len()) };
            if got < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted || e.kind() == io::ErrorKind::WouldBlock {
                    continue;
                }
                return Err(e);
            }
            if got == 0 {
                self.eof = true;
            }
            self.buf.extend_from_slice(&chunk[..got as usize]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn words_quotes_escapes_and_comments() {
        assert_eq!(
            split("  spawn -> a  b ").unwrap(),
            ["spawn", "->", "a", "b"]
        );
        assert_eq!(
            split("echo 'a b' \"c\"d x\\ y # no").unwrap(),
            ["echo", "a b", "cd", "x y"]
        );
        assert_eq!(split("echo 'a"), Err('\''));
        assert!(split("# all comment").unwrap().is_empty());
    }
}
