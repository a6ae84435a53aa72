//! Nearness of names, for "did you mean" in error messages: the edit distance, and the
//! nearest of a list. Used by policy loading (variable names) and by the gateway (tool names).

/// Levenshtein distance over chars.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (diag + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            diag = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

/// The candidate nearest to `name`, if one is near enough to be a likely misspelling (at most
/// a third of its length away, one edit for short names).
pub fn nearest<'a>(name: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let limit = (name.chars().count() / 3).max(1);
    candidates
        .iter()
        .map(|c| (edit_distance(name, c), *c))
        .filter(|(d, _)| *d <= limit)
        .min()
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distance_counts_single_char_edits() {
        assert_eq!(edit_distance("demo.echo", "demo.echo"), 0);
        assert_eq!(edit_distance("demo.ech", "demo.echo"), 1);
        assert_eq!(edit_distance("demo.ecko", "demo.echo"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn nearest_names_a_likely_misspelling_only() {
        let names = ["tool", "args", "resume", "principal"];
        assert_eq!(nearest("resme", &names), Some("resume"));
        assert_eq!(nearest("principle", &names), Some("principal"));
        assert_eq!(nearest("banana", &names), None);
    }
}
