//! The election half of the fencing story that every recipe in
//! `docs/fencing.md` tells with its own resource: leader A writes, stalls
//! with a write in flight while its term ends, B takes the next term and
//! writes, and A's late write arrives. The examples keep what differs
//! between resources (the fenced write itself); the election steps and the
//! checks of each write's outcome are the same for every store and live
//! here.

use std::fmt::Debug;
use std::future::Future;

use tenure::fence::StaleToken;
use tenure::store::LeaseStore;
use tenure::Elector;
use tenure::Term;

/// The server URL an example runs against: its first argument, else the
/// environment variable `env` the tests set; `what` names the URL for the
/// error when neither is there.
pub fn url_argument(env: &str, what: &str) -> Result<String, StoryError> {
    std::env::args()
        .nth(1)
        .or_else(|| std::env::var(env).ok())
        .ok_or_else(|| format!("give {what} as the first argument or in {env}").into())
}

/// Runs a `fencing_*` example's story (its `run(url)`) as the example's
/// test does: the story must finish within a minute and end `Ok`. The
/// story is boxed at once, so the test's future stays small.
///
/// # Panics
///
/// If the story takes longer than a minute, or ends in an error (the
/// assertion this helper is for).
pub fn story_holds<E: Debug>(
    story: impl Future<Output = Result<(), E>>,
) -> impl Future<Output = ()> {
    let story = Box::pin(story);
    async move {
        tokio::time::timeout(std::time::Duration::from_secs(60), story)
            .await
            .expect("the example finishes within a minute")
            .expect("the example's story holds");
    }
}

/// What the examples' `run` returns on any step going differently.
pub type StoryError = Box<dyn std::error::Error + Send + Sync>;

/// Two candidates for one group, as two processes would be: A leading,
/// B standing behind it, then B leading.
pub struct HandOver {
    group: String,
    a: Elector,
    term_a: Term,
    b: Option<Elector>,
    term_b: Option<Term>,
}

impl HandOver {
    /// Starts candidate A on `store_a` and waits for its term. The future
    /// is boxed: it holds a store, which can be large.
    pub fn start(
        store_a: impl LeaseStore,
        group: &str,
    ) -> impl Future<Output = Result<HandOver, StoryError>> + Send {
        let group = group.to_owned();
        Box::pin(async move {
            let a = Elector::builder(store_a, &group)
                .candidate_id("a")
                .start()?;
            let term_a = a.wait_for_leadership().await?;
            println!("A leads with token {}", term_a.token());
            Ok(HandOver {
                group,
                a,
                term_a,
                b: None,
                term_b: None,
            })
        })
    }

    /// Starts candidate B on `store_b` (a handle of its own, as another
    /// process would have), standing behind A.
    pub fn and_b(mut self, store_b: impl LeaseStore) -> Result<HandOver, StoryError> {
        let b = Elector::builder(store_b, &self.group)
            .candidate_id("b")
            .start()?;
        self.b = Some(b);
        Ok(self)
    }

    /// The token A's writes carry.
    pub fn token_a(&self) -> u64 {
        self.term_a.token()
    }

    /// Checks that A's write on time was admitted. `recipe` names the
    /// recipe where a resource has several, else is empty.
    pub fn a_wrote<T>(
        &self,
        recipe: &str,
        outcome: Result<T, StaleToken>,
    ) -> Result<(), StoryError> {
        outcome.map_err(|e| format!("A's write on time was refused{}: {e}", label(recipe)))?;
        println!("A wrote with token {}{}", self.token_a(), label(recipe));
        Ok(())
    }

    /// A stalls with its next write in flight and its term ends. Here A
    /// steps down, so that B need not wait out a whole term; to the
    /// resource, a pause past the deadline looks the same. Returns the
    /// token of B's term, refusing one that is not above A's.
    pub async fn a_stalls(&mut self) -> Result<u64, StoryError> {
        let b = self
            .b
            .as_ref()
            .ok_or("B is not standing: call and_b first")?;
        self.a.shutdown().await;
        let term_b = b.wait_for_leadership().await?;
        let token_b = term_b.token();
        if token_b <= self.token_a() {
            return Err(format!("B's token {token_b} is not above A's {}", self.token_a()).into());
        }
        println!("B leads with token {token_b}");
        self.term_b = Some(term_b);
        Ok(token_b)
    }

    /// Checks that B's write was admitted.
    pub fn b_wrote<T>(
        &self,
        recipe: &str,
        outcome: Result<T, StaleToken>,
    ) -> Result<(), StoryError> {
        let token_b = self.token_b()?;
        outcome.map_err(|e| format!("B's write was refused{}: {e}", label(recipe)))?;
        println!("B wrote with token {token_b}{}", label(recipe));
        Ok(())
    }

    /// Checks that A's late write, arriving after B's, was refused because
    /// the resource had admitted B's token.
    pub fn a_late_write_refused<T: Debug>(
        &self,
        recipe: &str,
        outcome: Result<T, StaleToken>,
    ) -> Result<(), StoryError> {
        let token_b = self.token_b()?;
        match outcome {
            Err(stale) if stale.highest == token_b => {
                println!("A's late write refused{}: {stale}", label(recipe));
                Ok(())
            }
            other => Err(format!(
                "A's late write with token {} was not refused{}: {other:?}",
                self.token_a(),
                label(recipe)
            )
            .into()),
        }
    }

    /// Stops both candidates.
    pub async fn finish(self) {
        self.a.shutdown().await;
        if let Some(b) = self.b {
            b.shutdown().await;
        }
    }

    fn token_b(&self) -> Result<u64, StoryError> {
        match &self.term_b {
            Some(term) => Ok(term.token()),
            None => Err("B has no term yet: call a_stalls first".into()),
        }
    }
}

fn label(recipe: &str) -> String {
    if recipe.is_empty() {
        String::new()
    } else {
        format!(" ({recipe})")
    }
}
