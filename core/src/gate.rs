//! The approval gate's rules, one for Swarms and DeploymentPlans. Pure: no
//! I/O, no clock; the controller says what pends now and what numbers were
//! published, the gate says what each approval does.
//!
//! # Proposals and approvals
//!
//! A *proposal* is a change that waits for a reviewer: a Swarm revision, one
//! operation of a DeploymentPlan, or the set of a plan's operations of one
//! deployment revision that wait together. It has a [`Subject`] (what it
//! is), an identity that is never given twice within its object (a number
//! from a counter kept in status: the Swarm's `status.latestRevision`, the
//! plan's `status.operationCounter` and `status.deploymentCounter`), and a
//! content hash over everything applying it changes.
//!
//! An *approval* (`shoal.dev/approve`) names exactly one proposal by
//! subject and hash. [`parse`] reads an annotation value in the object's
//! [`Grammar`]; [`judge`] weighs one approval against where its subject
//! [`Standing`]s now:
//!
//! | the approval names                               | judgement |
//! |--------------------------------------------------|-----------|
//! | a proposal that pends now, with its hash         | [`Judgement::Approves`] |
//! | a proposal that pends now, with another hash     | refused ([`Refusal::WrongHash`]) |
//! | a proposal approved before, with its hash        | [`Judgement::UsedUp`]: it approves nothing more, and may stay |
//! | a number not published before this pass          | refused ([`Refusal::Future`]), and the number is burnt ([`burn`]) |
//! | a proposal withdrawn, superseded, failed, older  | refused ([`Refusal::NotPending`]) |
//! | something the object never had                   | refused ([`Refusal::Unknown`]) |
//! | text that is not an approval                     | refused ([`Refusal::Malformed`]) |
//!
//! Nothing refused stands for later: a number once published or burnt is
//! never given to another proposal, so an approval of it can never match a
//! later one. An approval is weighed against the numbers published *before*
//! the pass that reads it, so one written in advance for a number nobody
//! has seen is refused, whatever comes next.
//!
//! # Where the kinds differ
//!
//! A Swarm's annotation is one approval, `<revision>/<hash>`
//! ([`Grammar::Swarm`]). A plan's is a comma-separated list
//! ([`Grammar::Plan`]) of `<operation id>/<hash>` items
//! ([`Subject::Operation`]) and `deployment-<revision>/<hash>` items
//! ([`Subject::Deployment`]: every operation of that revision awaiting
//! approval, as one set whose hash covers their ids and hashes). Operation
//! ids end in their number (`create-web-0-r3-7`, see [`operation_number`]);
//! ids given before numbers existed (`create-web-0-r3`) carry none and are
//! judged by the operation history alone.

use std::fmt;

use crate::slice::HASH_PREFIX;

/// The largest number the gate gives (the largest integer JSON tools read exactly).
pub const MAX_NUMBER: u64 = (1 << 53) - 1;

/// The prefix of an approval of a whole deployment revision's waiting operations.
pub const DEPLOYMENT_PREFIX: &str = "deployment-";

/// What an approval names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    /// A Swarm revision, `<revision>/<hash>`.
    Revision(u64),
    /// One plan operation, `<operation id>/<hash>`.
    Operation {
        /// The operation's id.
        id: String,
        /// The number its id ends in; `None` for an id given before numbers.
        number: Option<u64>,
    },
    /// Every operation of one plan deployment revision awaiting approval,
    /// `deployment-<revision>/<hash>`.
    Deployment(u64),
}

impl Subject {
    /// The number that identifies the subject, when it has one.
    pub fn number(&self) -> Option<u64> {
        match self {
            Subject::Revision(number) | Subject::Deployment(number) => Some(*number),
            Subject::Operation { number, .. } => *number,
        }
    }
}

impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Subject::Revision(revision) => write!(f, "revision {revision}"),
            Subject::Operation { id, .. } => write!(f, "operation {id}"),
            Subject::Deployment(revision) => write!(f, "deployment {revision}"),
        }
    }
}

/// The annotation value (one approval, or one item of a plan's list) that
/// approves `subject` with content hash `hash`.
pub fn approval_value(subject: &Subject, hash: &str) -> String {
    match subject {
        Subject::Revision(revision) => format!("{revision}/{hash}"),
        Subject::Operation { id, .. } => format!("{id}/{hash}"),
        Subject::Deployment(revision) => format!("{DEPLOYMENT_PREFIX}{revision}/{hash}"),
    }
}

/// Which approvals an object's annotation holds (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grammar {
    /// A Swarm: exactly one `<revision>/<hash>`.
    Swarm,
    /// A DeploymentPlan: comma-separated `<operation id>/<hash>` and
    /// `deployment-<revision>/<hash>` items.
    Plan,
}

impl Grammar {
    /// The shape an approval must have, in words, for refusals.
    pub fn expected(self) -> &'static str {
        match self {
            Grammar::Swarm => {
                "`<revision>/<hash>` (e.g. `4/sha256:…`, as `status.pendingRevision.approveWith` gives it)"
            }
            Grammar::Plan => {
                "`<operation id>/<hash>` or `deployment-<revision>/<hash>` items (as status.operations[].approveWith and status.approveDeploymentWith give them)"
            }
        }
    }
}

/// One approval, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approval {
    /// What it names.
    pub subject: Subject,
    /// The content hash it names, `sha256:<64 hex>`.
    pub hash: String,
    /// The approval as written (trimmed).
    pub text: String,
    /// The grammar it was read in (for the wording of refusals).
    pub grammar: Grammar,
}

/// Why the gate refused one approval. Its `Display` names the annotation,
/// the value and what to do instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Not an approval at all.
    Malformed {
        /// The text refused.
        text: String,
        /// The grammar it should have had.
        grammar: Grammar,
        /// The number it names, when one can be read (it is burnt like a future one).
        number: Option<u64>,
    },
    /// A number not published before this pass; it is burnt.
    Future {
        /// The approval.
        approval: Approval,
        /// The latest number published before this pass.
        latest: u64,
    },
    /// The subject pends, but with another content hash.
    WrongHash {
        /// The approval.
        approval: Approval,
        /// The hash that would approve it.
        expected: String,
        /// The value that would approve it.
        approve_with: String,
    },
    /// The subject exists but does not pend (withdrawn, superseded, failed,
    /// older than the one pending, or approved with another hash).
    NotPending {
        /// The approval.
        approval: Approval,
        /// Why, in words (with what to approve instead).
        why: String,
    },
    /// The object never had this subject.
    Unknown {
        /// The approval.
        approval: Approval,
    },
}

/// Where the key of an annotation is named in refusals.
const ANNOTATION: &str = crate::names::ANNOTATION_APPROVE;

impl Refusal {
    /// The number this refusal burns, if any: a future one, or one read
    /// from a malformed approval that names a number not given yet.
    pub fn burns(&self) -> Option<u64> {
        match self {
            Refusal::Future { approval, .. } => approval.subject.number(),
            Refusal::Malformed { number, .. } => *number,
            _ => None,
        }
        .filter(|number| *number <= MAX_NUMBER)
    }
}

/// `shoal.dev/approve` (a Swarm's one value) or `shoal.dev/approve item
/// "<text>"` (one item of a plan's list).
fn named(approval: &Approval) -> String {
    match approval.grammar {
        Grammar::Swarm => ANNOTATION.to_owned(),
        Grammar::Plan => format!("{ANNOTATION} item {:?}", approval.text),
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Malformed { text, grammar, .. } => {
                write!(f, "{ANNOTATION}={text:?} is not {}", grammar.expected())
            }
            Refusal::Future { approval, latest } => {
                let subject = &approval.subject;
                let number = subject.number().unwrap_or_default();
                write!(
                    f,
                    "{} names {subject}, which does not exist yet (the latest is {latest}); an approval never stands for a {} nobody has reviewed, so number {number} will not be used",
                    named(approval),
                    match subject {
                        Subject::Revision(_) => "revision",
                        Subject::Operation { .. } => "operation",
                        Subject::Deployment(_) => "deployment",
                    }
                )
            }
            Refusal::WrongHash {
                approval,
                expected,
                approve_with,
            } => write!(
                f,
                "{} names {} with hash {}, but the pending {} has hash {expected}; approve with {ANNOTATION}={approve_with}",
                named(approval),
                approval.subject,
                approval.hash,
                approval.subject
            ),
            Refusal::NotPending { approval, why } => write!(
                f,
                "{} names {}, which is not pending ({why})",
                named(approval),
                approval.subject
            ),
            Refusal::Unknown { approval } => write!(
                f,
                "{} names {}, which the {} does not have",
                named(approval),
                approval.subject,
                match approval.grammar {
                    Grammar::Swarm => "Swarm",
                    Grammar::Plan => "plan",
                }
            ),
        }
    }
}

/// The number an operation id ends in (`create-web-0-r3-7` → 7); `None` for
/// ids given before numbers (`create-web-0-r3`, `create-web-0-r3.2`).
pub fn operation_number(id: &str) -> Option<u64> {
    let (_, last) = id.rsplit_once('-')?;
    if last.is_empty() || !last.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    last.parse().ok()
}

/// Whether `hash` is `sha256:` and 64 hex digits.
fn is_hash(hash: &str) -> bool {
    hash.strip_prefix(HASH_PREFIX).is_some_and(|digest| {
        digest.len() == 64 && digest.bytes().all(|byte| byte.is_ascii_hexdigit())
    })
}

/// Reads an annotation value: one approval per item, or why an item is
/// not one. An empty value is one malformed item.
pub fn parse(grammar: Grammar, value: &str) -> Vec<Result<Approval, Refusal>> {
    let items: Vec<&str> = match grammar {
        Grammar::Swarm => vec![value.trim()],
        Grammar::Plan => value
            .split(',')
            .map(str::trim)
            .filter(|item| !item.is_empty())
            .collect(),
    };
    if items.is_empty() || items == [""] {
        return vec![Err(Refusal::Malformed {
            text: value.trim().to_owned(),
            grammar,
            number: None,
        })];
    }
    items
        .into_iter()
        .map(|item| parse_item(grammar, item))
        .collect()
}

fn parse_item(grammar: Grammar, text: &str) -> Result<Approval, Refusal> {
    let malformed = |number: Option<u64>| Refusal::Malformed {
        text: text.to_owned(),
        grammar,
        number,
    };
    let Some((name, hash)) = text.split_once('/') else {
        return Err(malformed(None));
    };
    let subject = match grammar {
        Grammar::Swarm => Subject::Revision(name.parse().map_err(|_| malformed(None))?),
        Grammar::Plan => match name.strip_prefix(DEPLOYMENT_PREFIX) {
            Some(revision) => Subject::Deployment(revision.parse().map_err(|_| malformed(None))?),
            None if name.is_empty() || name.chars().any(char::is_whitespace) => {
                return Err(malformed(None));
            }
            None => Subject::Operation {
                id: name.to_owned(),
                number: operation_number(name),
            },
        },
    };
    if !is_hash(hash) {
        return Err(malformed(subject.number()));
    }
    Ok(Approval {
        subject,
        hash: hash.to_owned(),
        text: text.to_owned(),
        grammar,
    })
}

/// Where the subject an approval names stands now, as the object knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// It waits for approval; this hash and this value approve it.
    Pending {
        /// Its content hash.
        hash: String,
        /// The annotation value that approves it.
        approve_with: String,
    },
    /// It was approved before (by a reviewer or a policy), with this hash.
    Approved {
        /// Its content hash.
        hash: String,
    },
    /// It exists but will never wait for approval again; why, in words.
    Closed {
        /// Why (withdrawn, superseded, failed, …), with what to approve instead.
        why: String,
    },
    /// Given once and no longer recorded (pruned from the history): an
    /// approval of it can approve nothing, and is used up.
    Forgotten,
    /// The object never had it.
    Unknown,
}

/// What the gate makes of one approval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judgement {
    /// It approves its subject now.
    Approves,
    /// It approved its subject before: nothing more, and not a refusal.
    UsedUp,
    /// Refused: a Warning, and it never stands for later.
    Refused(Refusal),
}

/// Weighs `approval` against its subject's `standing`, with `published` the
/// latest number of the subject's kind published before this pass (see the
/// module docs for the table).
pub fn judge(approval: &Approval, published: u64, standing: Standing) -> Judgement {
    if let Err(refusal) = published_before(approval, published) {
        return Judgement::Refused(refusal);
    }
    let refused = |refusal| Judgement::Refused(refusal);
    match standing {
        Standing::Pending { hash, .. } if hash == approval.hash => Judgement::Approves,
        Standing::Pending { hash, approve_with } => refused(Refusal::WrongHash {
            approval: approval.clone(),
            expected: hash,
            approve_with,
        }),
        Standing::Approved { hash } if hash == approval.hash => Judgement::UsedUp,
        Standing::Approved { hash } => refused(Refusal::NotPending {
            approval: approval.clone(),
            why: format!(
                "it was approved with hash {hash}; an approval must name it as it was reviewed"
            ),
        }),
        Standing::Closed { why } => refused(Refusal::NotPending {
            approval: approval.clone(),
            why,
        }),
        // A numbered subject published and since pruned: its number is never given
        // again, so the approval can approve nothing; the same holds for none.
        Standing::Forgotten if approval.subject.number().is_some() => Judgement::UsedUp,
        Standing::Forgotten | Standing::Unknown => refused(Refusal::Unknown {
            approval: approval.clone(),
        }),
    }
}

/// The first rule of [`judge`] alone: an approval naming a number above
/// `published` (the latest published before this pass) is refused.
pub fn published_before(approval: &Approval, published: u64) -> Result<(), Refusal> {
    match approval.subject.number() {
        Some(number) if number > published => Err(Refusal::Future {
            approval: approval.clone(),
            latest: published,
        }),
        _ => Ok(()),
    }
}

/// The counter after this pass's refusals: `published` raised to every
/// number a refusal burns (never past [`MAX_NUMBER`]).
pub fn burn<'a>(published: u64, refusals: impl IntoIterator<Item = &'a Refusal>) -> u64 {
    refusals
        .into_iter()
        .filter_map(Refusal::burns)
        .fold(published, u64::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash(digit: char) -> String {
        format!("sha256:{}", digit.to_string().repeat(64))
    }

    fn one(grammar: Grammar, value: &str) -> Result<Approval, Refusal> {
        let mut items = parse(grammar, value);
        assert_eq!(items.len(), 1, "{items:?}");
        items.remove(0)
    }

    fn pending(digit: char) -> Standing {
        Standing::Pending {
            hash: hash(digit),
            approve_with: format!("x/{}", hash(digit)),
        }
    }

    #[test]
    fn a_swarm_approval_is_one_revision_and_hash() {
        let approval = one(Grammar::Swarm, &format!(" 4/{} ", hash('a'))).expect("valid");
        assert_eq!(approval.subject, Subject::Revision(4));
        assert_eq!(approval.hash, hash('a'));
        for text in ["", "4", "abc", "4/sha256:abc", "x/sha256:", "4/sha1:00"] {
            let refusal = one(Grammar::Swarm, text).expect_err(text);
            assert!(
                refusal
                    .to_string()
                    .contains("is not `<revision>/<hash>` (e.g."),
                "{refusal}"
            );
        }
        // Two approvals in one Swarm value: not one approval.
        let two = format!("4/{},5/{}", hash('a'), hash('b'));
        assert!(one(Grammar::Swarm, &two).is_err());
    }

    #[test]
    fn a_plan_approval_is_a_list_of_operations_and_deployments() {
        let value = format!(
            "create-web-0-r1-7/{}, deployment-3/{},create-web-1-r1/{}",
            hash('a'),
            hash('b'),
            hash('c')
        );
        let items: Vec<Subject> = parse(Grammar::Plan, &value)
            .into_iter()
            .map(|item| item.expect("valid").subject)
            .collect();
        assert_eq!(
            items,
            [
                Subject::Operation {
                    id: "create-web-0-r1-7".to_owned(),
                    number: Some(7)
                },
                Subject::Deployment(3),
                Subject::Operation {
                    id: "create-web-1-r1".to_owned(),
                    number: None
                },
            ]
        );
        let refused = parse(Grammar::Plan, "deployment-x/sha256:00, ,nothing");
        assert_eq!(refused.len(), 2);
        assert!(refused.iter().all(Result::is_err));
        assert!(parse(Grammar::Plan, "  ")[0].is_err(), "an empty value");
    }

    #[test]
    fn operation_numbers_are_read_only_from_ids_that_end_in_one() {
        assert_eq!(operation_number("create-web-0-r3-12"), Some(12));
        assert_eq!(operation_number("create-web-0-r3"), None);
        assert_eq!(operation_number("create-web-0-r3.2"), None);
        assert_eq!(operation_number("create-web-0-r3-"), None);
    }

    #[test]
    fn an_approval_of_what_pends_now_with_its_hash_approves_it() {
        let approval = one(Grammar::Swarm, &format!("2/{}", hash('a'))).expect("valid");
        assert_eq!(judge(&approval, 2, pending('a')), Judgement::Approves);
        let Judgement::Refused(refusal) = judge(&approval, 2, pending('b')) else {
            panic!("another hash approved")
        };
        assert!(
            refusal
                .to_string()
                .contains("names revision 2 with hash sha256:aaaa"),
            "{refusal}"
        );
    }

    #[test]
    fn a_number_not_published_before_this_pass_is_refused_and_burnt_whatever_pends() {
        for (grammar, text) in [
            (Grammar::Swarm, format!("5/{}", hash('a'))),
            (Grammar::Plan, format!("deployment-5/{}", hash('a'))),
            (Grammar::Plan, format!("create-web-0-r1-5/{}", hash('a'))),
        ] {
            let approval = one(grammar, &text).expect("valid");
            // Even when the subject's standing says it pends with that very hash.
            let Judgement::Refused(refusal) = judge(&approval, 4, pending('a')) else {
                panic!("{text} approved in advance")
            };
            assert!(
                refusal
                    .to_string()
                    .contains("which does not exist yet (the latest is 4)"),
                "{refusal}"
            );
            assert_eq!(burn(4, [&refusal]), 5, "{text}");
        }
    }

    #[test]
    fn a_malformed_approval_naming_a_future_number_burns_it_too() {
        let refusal = one(Grammar::Swarm, "9/garbage").expect_err("malformed");
        assert_eq!(burn(4, [&refusal]), 9);
        assert_eq!(burn(12, [&refusal]), 12, "never lowers the counter");
        let huge = one(Grammar::Swarm, &format!("{}/x", u64::MAX)).expect_err("malformed");
        assert_eq!(burn(4, [&huge]), 4, "never past MAX_NUMBER");
    }

    #[test]
    fn an_approval_used_before_is_used_up_and_not_refused() {
        let approval =
            one(Grammar::Plan, &format!("create-web-0-r1-3/{}", hash('a'))).expect("valid");
        let approved = Standing::Approved { hash: hash('a') };
        assert_eq!(judge(&approval, 9, approved), Judgement::UsedUp);
        assert_eq!(judge(&approval, 9, Standing::Forgotten), Judgement::UsedUp);
        let other = Standing::Approved { hash: hash('b') };
        assert!(matches!(
            judge(&approval, 9, other),
            Judgement::Refused(Refusal::NotPending { .. })
        ));
    }

    #[test]
    fn withdrawn_superseded_and_unknown_subjects_are_refused_naming_why() {
        let approval = one(Grammar::Plan, &format!("deployment-2/{}", hash('a'))).expect("valid");
        let closed = Standing::Closed {
            why: "superseded by deployment 3".to_owned(),
        };
        let Judgement::Refused(refusal) = judge(&approval, 3, closed) else {
            panic!("a superseded deployment approved")
        };
        assert_eq!(
            refusal.to_string(),
            format!(
                "shoal.dev/approve item \"deployment-2/{}\" names deployment 2, which is not pending (superseded by deployment 3)",
                hash('a')
            )
        );
        let legacy = one(Grammar::Plan, &format!("create-web-0-r1/{}", hash('a'))).expect("valid");
        assert!(matches!(
            judge(&legacy, 3, Standing::Forgotten),
            Judgement::Refused(Refusal::Unknown { .. })
        ));
        assert!(matches!(
            judge(&legacy, 3, Standing::Unknown),
            Judgement::Refused(Refusal::Unknown { .. })
        ));
    }
}
