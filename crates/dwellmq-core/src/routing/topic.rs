//! Topic routing: a trie of binding-key words, walked once per message.
//!
//! Keys are split on `.` exactly as RabbitMQ's `split_topic_key/1` does: the empty key has no
//! words, and every `.` separates two words, so `"a."` is `["a", ""]` and `"."` is `["", ""]`.
//! In a binding key `*` is exactly one word and `#` zero or more words.
//!
//! The walk visits each (trie node, position in the routing key) pair at most once: a `#` node
//! remembers the earliest position it was entered at during this walk, and positions after it
//! have already been tried. Without that, patterns such as `#.a.#.a.#` take time exponential in
//! the number of words (RabbitMQ's own trie has that problem). The pending work lives in a
//! thread-local scratch buffer, so a walk allocates nothing once the buffer has grown.

use std::cell::RefCell;
use std::collections::HashMap;

use dwellmq_codec::ShortStr;

use crate::routing::destinations::DestinationCounts;
use crate::routing::Destination;

type NodeId = u32;

const ROOT: NodeId = 0;

/// One trie node: the pattern prefix spelled by the path from the root.
#[derive(Debug, Clone, Default)]
struct Node {
    /// Children by literal word.
    words: HashMap<ShortStr, NodeId>,
    /// Child for `*`.
    star: Option<NodeId>,
    /// Child for `#`.
    hash: Option<NodeId>,
    /// Destinations of bindings whose key ends here.
    destinations: DestinationCounts,
    /// Parent and the edge leading here, to prune empty branches.
    parent: Option<(NodeId, Edge)>,
}

impl Node {
    fn is_unused(&self) -> bool {
        self.words.is_empty()
            && self.star.is_none()
            && self.hash.is_none()
            && self.destinations.is_empty()
    }
}

#[derive(Debug, Clone)]
enum Edge {
    Word(ShortStr),
    Star,
    Hash,
}

impl Edge {
    fn of(word: &str) -> Edge {
        match word {
            "*" => Edge::Star,
            "#" => Edge::Hash,
            w => Edge::Word(ShortStr::from(w)),
        }
    }
}

/// The words of a topic key, split as RabbitMQ does (`""` has none).
fn words(key: &str) -> impl Iterator<Item = &str> {
    let mut it = (!key.is_empty()).then(|| key.split('.'));
    std::iter::from_fn(move || it.as_mut()?.next())
}

/// The bindings of a topic exchange, indexed by binding key.
#[derive(Debug, Clone)]
pub(crate) struct TopicTrie {
    nodes: Vec<Node>,
    free: Vec<NodeId>,
}

impl Default for TopicTrie {
    fn default() -> Self {
        TopicTrie {
            nodes: vec![Node::default()],
            free: Vec::new(),
        }
    }
}

impl TopicTrie {
    fn node(&self, id: NodeId) -> Option<&Node> {
        self.nodes.get(id as usize)
    }

    fn node_mut(&mut self, id: NodeId) -> Option<&mut Node> {
        self.nodes.get_mut(id as usize)
    }

    fn child(&self, id: NodeId, edge: &Edge) -> Option<NodeId> {
        let node = self.node(id)?;
        match edge {
            Edge::Word(w) => node.words.get(w.as_str()).copied(),
            Edge::Star => node.star,
            Edge::Hash => node.hash,
        }
    }

    fn new_child(&mut self, parent: NodeId, edge: Edge) -> NodeId {
        let node = Node {
            parent: Some((parent, edge.clone())),
            ..Node::default()
        };
        let id = match self.free.pop() {
            Some(id) => {
                if let Some(slot) = self.node_mut(id) {
                    *slot = node;
                }
                id
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as NodeId
            }
        };
        if let Some(p) = self.node_mut(parent) {
            match edge {
                Edge::Word(w) => {
                    p.words.insert(w, id);
                }
                Edge::Star => p.star = Some(id),
                Edge::Hash => p.hash = Some(id),
            }
        }
        id
    }

    /// Adds one binding of `pattern` to `destination`.
    pub(crate) fn insert(&mut self, pattern: &str, destination: &Destination) {
        let mut at = ROOT;
        for word in words(pattern) {
            let edge = Edge::of(word);
            at = match self.child(at, &edge) {
                Some(next) => next,
                None => self.new_child(at, edge),
            };
        }
        if let Some(node) = self.node_mut(at) {
            node.destinations.add(destination);
        }
    }

    /// Removes one binding of `pattern` to `destination`, pruning branches left empty.
    pub(crate) fn remove(&mut self, pattern: &str, destination: &Destination) {
        let mut at = ROOT;
        for word in words(pattern) {
            match self.child(at, &Edge::of(word)) {
                Some(next) => at = next,
                None => return,
            }
        }
        if let Some(node) = self.node_mut(at) {
            node.destinations.remove(destination);
        }
        while at != ROOT {
            let Some(node) = self.node(at) else { return };
            if !node.is_unused() {
                return;
            }
            let Some((parent, edge)) = node.parent.clone() else {
                return;
            };
            if let Some(p) = self.node_mut(parent) {
                match edge {
                    Edge::Word(w) => {
                        p.words.remove(w.as_str());
                    }
                    Edge::Star => p.star = None,
                    Edge::Hash => p.hash = None,
                }
            }
            if let Some(n) = self.node_mut(at) {
                *n = Node::default();
            }
            self.free.push(at);
            at = parent;
        }
    }

    /// Appends the destinations of every binding whose pattern matches `key`. A destination may
    /// appear more than once (reached through several patterns); the caller de-duplicates.
    pub(crate) fn collect(&self, key: &str, out: &mut Vec<Destination>) {
        let walked = SCRATCH.try_with(|cell| match cell.try_borrow_mut() {
            Ok(mut scratch) => {
                self.walk(key, &mut scratch, out);
                true
            }
            Err(_) => false,
        });
        // The shared buffer is unavailable only while this thread is being torn down or if a
        // walk re-entered itself; use a fresh one then.
        if walked != Ok(true) {
            self.walk(key, &mut Scratch::default(), out);
        }
    }

    fn walk(&self, key: &str, scratch: &mut Scratch, out: &mut Vec<Destination>) {
        scratch.clear();
        let cursor = Cursor { key };
        scratch.tasks.push(Task::Walk(ROOT, cursor.first()));
        while let Some(task) = scratch.tasks.pop() {
            #[cfg(test)]
            {
                scratch.steps += 1;
            }
            match task {
                Task::Walk(id, pos) => {
                    let Some(node) = self.node(id) else { continue };
                    match cursor.word_at(pos) {
                        None => {
                            node.destinations.extend_into(out);
                            if let Some(h) = node.hash {
                                scratch.tasks.push(Task::Hash(h, pos));
                            }
                        }
                        Some((word, next)) => {
                            if let Some(&c) = node.words.get(word) {
                                scratch.tasks.push(Task::Walk(c, next));
                            }
                            if let Some(c) = node.star {
                                scratch.tasks.push(Task::Walk(c, next));
                            }
                            if let Some(h) = node.hash {
                                scratch.tasks.push(Task::Hash(h, pos));
                            }
                        }
                    }
                }
                Task::Hash(h, pos) => {
                    // `#` at node h swallows zero or more words from `pos` on: walk h at
                    // every position from `pos` to the end, minus those already walked.
                    let stop = scratch.hash_entered(h, pos);
                    let mut at = pos;
                    while at < stop {
                        scratch.tasks.push(Task::Walk(h, at));
                        match cursor.word_at(at) {
                            Some((_, next)) => at = next,
                            None => break,
                        }
                    }
                }
            }
        }
    }
}

/// Positions in a routing key: the byte offset where the remaining words start, or
/// `key.len() + 1` once no word is left (so `"a."` has positions 0, 2 and 3).
#[derive(Clone, Copy)]
struct Cursor<'k> {
    key: &'k str,
}

impl<'k> Cursor<'k> {
    fn end(self) -> usize {
        self.key.len() + 1
    }

    fn first(self) -> usize {
        if self.key.is_empty() {
            self.end()
        } else {
            0
        }
    }

    /// The word at `pos` and the position after it, or `None` at the end.
    fn word_at(self, pos: usize) -> Option<(&'k str, usize)> {
        let rest = self.key.get(pos..)?;
        Some(match rest.find('.') {
            Some(i) => (&rest[..i], pos + i + 1),
            None => (rest, self.end()),
        })
    }
}

#[derive(Debug, Clone, Copy)]
enum Task {
    /// Match the remaining words from this position at this node.
    Walk(NodeId, usize),
    /// Enter a `#` node at this position.
    Hash(NodeId, usize),
}

/// Per-walk state, kept between walks so its buffers are reused.
#[derive(Debug, Default)]
struct Scratch {
    tasks: Vec<Task>,
    /// `#` nodes entered so far, with the earliest position each was entered at.
    hash_small: Vec<(NodeId, usize)>,
    /// The same once there are many of them.
    hash_large: HashMap<NodeId, usize>,
    /// Tasks run by the last walk: what the tests bound instead of a clock.
    #[cfg(test)]
    steps: usize,
}

/// Beyond this many `#` nodes in one walk, look them up by hash.
const HASH_SMALL_LIMIT: usize = 32;

impl Scratch {
    fn clear(&mut self) {
        #[cfg(test)]
        {
            self.steps = 0;
        }
        self.tasks.clear();
        self.hash_small.clear();
        if !self.hash_large.is_empty() {
            self.hash_large.clear();
        }
    }

    /// Records entering `#` node `h` at `pos`; returns the position from which `h` has already
    /// been walked (positions at or after it need no second walk).
    fn hash_entered(&mut self, h: NodeId, pos: usize) -> usize {
        if let Some(entry) = self.hash_small.iter_mut().find(|(n, _)| *n == h) {
            let seen = entry.1;
            entry.1 = seen.min(pos);
            return seen;
        }
        if let Some(seen) = self.hash_large.get_mut(&h) {
            let before = *seen;
            *seen = before.min(pos);
            return before;
        }
        if self.hash_small.len() < HASH_SMALL_LIMIT {
            self.hash_small.push((h, pos));
        } else {
            self.hash_large.insert(h, pos);
        }
        usize::MAX
    }
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::destinations::dedupe_tail;
    use proptest::prelude::*;

    /// The reference: a direct recursive reading of the topic rules.
    fn reference_match(pattern: &[&str], key: &[&str]) -> bool {
        match pattern.split_first() {
            None => key.is_empty(),
            Some((&"#", rest)) => (0..=key.len()).any(|skip| reference_match(rest, &key[skip..])),
            Some((&"*", rest)) => !key.is_empty() && reference_match(rest, &key[1..]),
            Some((w, rest)) => key.first() == Some(w) && reference_match(rest, &key[1..]),
        }
    }

    fn split(key: &str) -> Vec<&str> {
        words(key).collect()
    }

    fn matches(pattern: &str, key: &str) -> bool {
        let mut t = TopicTrie::default();
        let q = Destination::Queue("q".into());
        t.insert(pattern, &q);
        let mut out = vec![];
        t.collect(key, &mut out);
        let trie = !out.is_empty();
        assert_eq!(
            trie,
            reference_match(&split(pattern), &split(key)),
            "trie and reference disagree on pattern {pattern:?} key {key:?}"
        );
        trie
    }

    #[test]
    fn splits_like_rabbitmq() {
        assert_eq!(split(""), Vec::<&str>::new());
        assert_eq!(split("a"), vec!["a"]);
        assert_eq!(split("a."), vec!["a", ""]);
        assert_eq!(split("."), vec!["", ""]);
        assert_eq!(split("a..b"), vec!["a", "", "b"]);
    }

    #[test]
    fn literal_and_star() {
        assert!(matches("a.b", "a.b"));
        assert!(!matches("a.b", "a.b.c"));
        assert!(!matches("a.b", "a"));
        assert!(matches("a.*", "a.b"));
        assert!(!matches("a.*", "a"));
        assert!(!matches("a.*", "a.b.c"));
        assert!(matches("*.*", "a.b"));
    }

    #[test]
    fn hash_matches_zero_or_more_words() {
        assert!(matches("#", ""));
        assert!(matches("#", "a"));
        assert!(matches("#", "a.b.c"));
        assert!(matches("a.#", "a"));
        assert!(matches("a.#", "a.b.c"));
        assert!(!matches("a.#", "b.a"));
        assert!(matches("#.a", "a"));
        assert!(matches("#.a", "x.y.a"));
        assert!(matches("a.#.b", "a.b"));
        assert!(matches("a.#.b", "a.x.y.b"));
        assert!(!matches("a.#.b", "a.x.y"));
        assert!(matches("#.#", ""));
        assert!(matches("#.#", "a.b"));
        assert!(matches("#.*", "a"));
        assert!(!matches("#.*", ""));
        assert!(matches("*.#", "a"));
        assert!(matches("a.#.#.b", "a.b"));
    }

    #[test]
    fn empty_words_and_keys() {
        assert!(matches("", ""));
        assert!(!matches("", "a"));
        assert!(!matches("*", ""));
        assert!(matches("*", "a"));
        assert!(matches("a.", "a."));
        assert!(!matches("a.", "a"));
        assert!(matches("a.*", "a."));
        assert!(matches("*.*", "."));
        assert!(!matches("*", "."));
        assert!(matches("#", "."));
        assert!(matches("a..b", "a..b"));
        assert!(matches("a.*.b", "a..b"));
        assert!(matches(".", "."));
        assert!(!matches(".", ""));
        // A routing key word that looks like a wildcard is just a word.
        assert!(matches("*", "#"));
        assert!(!matches("a", "*"));
    }

    #[test]
    fn removal_prunes_and_keeps_others() {
        let mut t = TopicTrie::default();
        let q1 = Destination::Queue("q1".into());
        let q2 = Destination::Queue("q2".into());
        t.insert("a.#.b", &q1);
        t.insert("a.*", &q2);
        t.insert("a.#.b", &q2);
        t.remove("a.#.b", &q1);
        let mut out = vec![];
        t.collect("a.x.b", &mut out);
        assert_eq!(out, vec![q2.clone()]);
        t.remove("a.#.b", &q2);
        t.remove("a.*", &q2);
        t.remove("not.there", &q2);
        assert_eq!(t.nodes.len() - t.free.len(), 1, "only the root is left");
        assert!(t.node(ROOT).is_some_and(Node::is_unused));
        // Freed nodes are reused.
        t.insert("x.y.z", &q1);
        assert_eq!(t.nodes.len(), 5, "root + a, #, b, * reused for x, y, z");
        out.clear();
        t.collect("x.y.z", &mut out);
        assert_eq!(out, vec![q1]);
    }

    /// The tasks a walk of `key` runs, and what it finds.
    fn steps_of(t: &TopicTrie, key: &str) -> (usize, Vec<Destination>) {
        let mut scratch = Scratch::default();
        let mut out = vec![];
        t.walk(key, &mut scratch, &mut out);
        dedupe_tail(&mut out, 0);
        (scratch.steps, out)
    }

    /// `#`s in a row could be matched in exponentially many ways; the walk visits each
    /// (node, position) pair a bounded number of times instead. Counted in tasks, not time:
    /// core reads no clock.
    #[test]
    fn pathological_patterns_take_steps_linear_in_nodes_times_positions() {
        for (hashes, words) in [(8, 24), (60, 127)] {
            let mut t = TopicTrie::default();
            let q = Destination::Queue("q".into());
            t.insert(&(vec!["#.a"; hashes].join(".") + ".#.b"), &q);
            t.insert(&vec!["#"; hashes].join("."), &q);
            let nodes = t.nodes.len() - t.free.len();
            let positions = words + 1;
            let (steps, out) = steps_of(&t, &vec!["a"; words].join("."));
            assert_eq!(out, vec![q]);
            // Each node is walked at most once per position, plus one entry task per `#`.
            assert!(
                steps <= 2 * nodes * positions,
                "{steps} steps for {nodes} nodes and {positions} positions"
            );
        }
    }

    #[test]
    fn many_bindings_share_the_trie() {
        let mut t = TopicTrie::default();
        for i in 0..10_000 {
            t.insert(
                &format!("orders.{i}.*"),
                &Destination::Queue(format!("q{i}").into()),
            );
        }
        let mut out = vec![];
        t.collect("orders.4242.created", &mut out);
        assert_eq!(out, vec![Destination::Queue("q4242".into())]);
    }

    fn key_strategy() -> impl Strategy<Value = String> {
        prop::collection::vec(prop::sample::select(vec!["a", "b", ""]), 0..6)
            .prop_map(|w| w.join("."))
    }

    fn pattern_strategy() -> impl Strategy<Value = String> {
        prop::collection::vec(prop::sample::select(vec!["a", "b", "", "*", "#"]), 0..6)
            .prop_map(|w| w.join("."))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn trie_agrees_with_the_reference(
            patterns in prop::collection::vec(pattern_strategy(), 1..8),
            keys in prop::collection::vec(key_strategy(), 1..8),
        ) {
            let mut t = TopicTrie::default();
            for (i, p) in patterns.iter().enumerate() {
                t.insert(p, &Destination::Queue(format!("q{i}").into()));
            }
            for key in &keys {
                let mut out = vec![];
                t.collect(key, &mut out);
                dedupe_tail(&mut out, 0);
                out.sort();
                let mut expected: Vec<Destination> = patterns
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| reference_match(&split(p), &split(key)))
                    .map(|(i, _)| Destination::Queue(format!("q{i}").into()))
                    .collect();
                expected.sort();
                prop_assert_eq!(out, expected, "key {:?} patterns {:?}", key, patterns);
            }
            // Removing every binding leaves an empty trie.
            for (i, p) in patterns.iter().enumerate() {
                t.remove(p, &Destination::Queue(format!("q{i}").into()));
            }
            prop_assert_eq!(t.nodes.len() - t.free.len(), 1);
        }
    }
}
