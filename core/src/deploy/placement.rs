//! Placement of one plan's instances on members.
//!
//! A plan asks for `instances` stable logical replicas named `<plan>-<n>`
//! ([`InstanceId`], `n >= 0`); an instance keeps its name when it moves. A
//! member *can hold* one more instance of the plan when it is available,
//! meets every requirement ([`super::capability`]), holds fewer than
//! `max_per_member` instances of the plan, and its capacity minus what other
//! plans reserve on it minus this plan's instances already there still fits
//! the plan's per-instance demand (the sum of its applications' demands),
//! and none of the plan's ports ([`PlanRequest::ports`]) is taken there,
//! by another plan's instance ([`Reservation::ports`]) or by another
//! instance of this plan: ports are held like capacity, through the same
//! reservations ([`reserved_by`]), except that a port is held by one
//! instance and can be shared by none.
//!
//! [`place_plan`] applies these rules, in this order:
//!
//! 1. **Sticky.** Instances in force are visited in ordinal order; each stays
//!    on its member if that member can hold it (it reserves capacity there
//!    first). Otherwise it is *displaced* (member gone, unavailable,
//!    ineligible, over capacity, over the limit, or a port of it held there
//!    by another plan's instance whose name sorts before its own: of two
//!    instances in force that need one port on one member, which happens
//!    only when two plans were placed at the same time, the one of lower
//!    name stays and the other moves, in both plans' passes alike).
//! 2. **Scale-down.** With more kept instances than asked for, every displaced
//!    instance is removed, then victims are removed one by one: the instance
//!    whose update domain holds the most instances of the plan; among those,
//!    whose member holds the most; among those, the highest ordinal. Each
//!    removal keeps domains (and members within them) as balanced as they
//!    were, and a balanced plan sheds its highest ordinals first.
//! 3. **Re-placement and scale-up.** With fewer kept instances than asked
//!    for, displaced instances are re-placed (lowest ordinals first; those
//!    beyond the count asked for are removed), then new instances take the
//!    lowest free ordinals. Each goes to the update domain with the fewest
//!    instances of the plan among those with a member that can hold it, then
//!    to the member of that domain with the fewest; ties (domains or members)
//!    go to the highest rendezvous score `mix(key_hash(instance),
//!    name_hash(domain or pod name))`, so the odd instances of different plans
//!    land in different domains rather than always in the first one.
//!
//! A *cordoned* member keeps its instances under rule 1 but is never chosen
//! under rule 3 (nor counted as room for an instance that fits nowhere else).
//!
//! 4. An instance no member can hold is reported with a typed
//!    [`UnplacedReason`]: no capable member (how many members each
//!    requirement rules out), no room (which resources fall short), ports
//!    taken (on each member with room, a port and the instance holding it),
//!    or the per-member limit.
//!
//! Everything is visited in a canonical order (members by id, requirements
//! sorted, instances by ordinal), so the result depends on the inputs only,
//! never on their order.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use super::capability::{
    Capabilities, Catalogue, CatalogueConflict, Requirement, RequirementError, ResolvedRequirement,
    resolve_all,
};
use super::port::Port;
use crate::hash::{key_hash, mix, name_hash};
use crate::member::{MemberId, Resources, canonical_ordinal};

/// Most instances one plan may ask for: far above any real plan, low enough
/// that a careless count cannot make the controller spin.
pub const MAX_INSTANCES: u32 = 10_000;

/// A stable logical replica of a plan. Its name, and its `Display`, is
/// `<plan>-<ordinal>`; ordering is by plan, then ordinal numerically.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct InstanceId {
    /// The plan's name.
    pub plan: String,
    /// The instance's ordinal within the plan.
    pub ordinal: u32,
}

/// A name that is not `<plan>-<ordinal>` for the given plan.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{name:?} is not an instance of plan {plan:?}: expected \"{plan}-<n>\" with n a whole number without leading zeros"
)]
pub struct InstanceNameError {
    /// The plan.
    pub plan: String,
    /// The name.
    pub name: String,
}

impl InstanceId {
    /// An instance id from its parts.
    pub fn new(plan: impl Into<String>, ordinal: u32) -> InstanceId {
        InstanceId {
            plan: plan.into(),
            ordinal,
        }
    }

    /// Parses `<plan>-<ordinal>` (canonical decimal ordinal) for one plan.
    pub fn parse(plan: &str, name: &str) -> Result<InstanceId, InstanceNameError> {
        let error = || InstanceNameError {
            plan: plan.to_owned(),
            name: name.to_owned(),
        };
        let suffix = name
            .strip_prefix(plan)
            .and_then(|rest| rest.strip_prefix('-'))
            .ok_or_else(error)?;
        let ordinal = canonical_ordinal(suffix).ok_or_else(error)?;
        Ok(InstanceId::new(plan, ordinal))
    }
}

impl fmt::Display for InstanceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.plan, self.ordinal)
    }
}

/// One member as plan placement sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeployMember {
    /// Pool and ordinal.
    pub id: MemberId,
    /// Whether the member may hold instances now.
    pub available: bool,
    /// The scored capabilities it offers.
    pub capabilities: Capabilities,
    /// What it can give to instances of all plans together.
    pub capacity: Resources,
    /// Its update domain (members of one domain are disrupted together).
    pub update_domain: String,
    /// Cordoned (its Swarm's `spec.cordon`): it keeps the instances it holds but gets
    /// no new or moved one.
    pub cordoned: bool,
}

impl DeployMember {
    /// An available member of `update_domain` with no capabilities or capacity.
    pub fn new(
        pool: impl Into<String>,
        ordinal: u32,
        update_domain: impl Into<String>,
    ) -> DeployMember {
        DeployMember {
            id: MemberId::new(pool, ordinal),
            available: true,
            capabilities: Capabilities::none(),
            capacity: Resources::none(),
            update_domain: update_domain.into(),
            cordoned: false,
        }
    }

    /// The same member, cordoned or not.
    pub fn with_cordoned(mut self, cordoned: bool) -> DeployMember {
        self.cordoned = cordoned;
        self
    }

    /// The same member with availability set.
    pub fn with_available(mut self, available: bool) -> DeployMember {
        self.available = available;
        self
    }

    /// The same member with its capabilities replaced.
    pub fn with_capabilities(mut self, capabilities: Capabilities) -> DeployMember {
        self.capabilities = capabilities;
        self
    }

    /// The same member with one resource capacity set.
    pub fn with_capacity(mut self, resource: impl Into<String>, amount: u64) -> DeployMember {
        self.capacity = self.capacity.with(resource, amount);
        self
    }
}

/// Everything [`place_plan`] needs for one plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanRequest {
    /// The plan's name (instances are `<plan>-<n>`).
    pub plan: String,
    /// How many instances the current deployment asks for.
    pub instances: u32,
    /// Most instances of this plan on one member (at least 1).
    pub max_per_member: u32,
    /// What one instance consumes: the sum of the plan's applications' demands.
    pub demand: Resources,
    /// Capability requirements every hosting member must meet.
    pub requirements: Vec<Requirement>,
    /// The ports one instance listens on: those of all the plan's
    /// applications. A member holds at most one instance needing a port.
    pub ports: BTreeSet<Port>,
    /// The Swarm's members.
    pub members: Vec<DeployMember>,
    /// Capacity and ports other plans already hold on each member.
    pub reserved: BTreeMap<MemberId, Reservation>,
    /// The placement in force: instance → member.
    pub in_force: BTreeMap<InstanceId, MemberId>,
}

impl PlanRequest {
    /// A request for `instances` instances of `plan`, at most one per
    /// member, with no demand, requirements, ports, members, reservations
    /// or placement in force.
    pub fn new(plan: impl Into<String>, instances: u32) -> PlanRequest {
        PlanRequest {
            plan: plan.into(),
            instances,
            max_per_member: 1,
            demand: Resources::none(),
            requirements: Vec::new(),
            ports: BTreeSet::new(),
            members: Vec::new(),
            reserved: BTreeMap::new(),
            in_force: BTreeMap::new(),
        }
    }
}

/// What other plans hold on one member: capacity, and ports with the
/// instance holding each.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reservation {
    /// Capacity held.
    pub resources: Resources,
    /// Each port held, with the instance holding it.
    pub ports: BTreeMap<Port, InstanceId>,
}

impl From<Resources> for Reservation {
    /// A reservation of capacity only.
    fn from(resources: Resources) -> Reservation {
        Reservation {
            resources,
            ports: BTreeMap::new(),
        }
    }
}

/// A port a member cannot give: who holds it there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortTaken {
    /// The member.
    pub member: MemberId,
    /// The port.
    pub port: Port,
    /// The instance holding it on that member.
    pub holder: InstanceId,
}

/// At most this many taken ports are named in a [`UnplacedReason::PortsTaken`]
/// (one per member); the rest are counted.
pub const MAX_NAMED_PORT_CONFLICTS: usize = 5;

/// What happened to an instance of the target placement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InstanceChange {
    /// It stays on the member it is on.
    Kept,
    /// It did not exist before.
    New,
    /// It was displaced from `from` and re-placed.
    Moved {
        /// Its previous member.
        from: MemberId,
    },
}

/// Why no member can hold an instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnplacedReason {
    /// No available member meets every requirement.
    NoCapableMember {
        /// Each requirement with how many available members it rules out.
        ruled_out: Vec<(Requirement, usize)>,
        /// How many members are unavailable.
        unavailable: usize,
    },
    /// Capable members under the per-member limit exist, but none has room.
    NoRoom {
        /// Resources that fall short on at least one of them.
        short: BTreeSet<String>,
        /// Capable members already at the per-member limit.
        at_limit: usize,
    },
    /// Capable members under the per-member limit with room exist, but on
    /// each a port the plan needs is held by another instance.
    PortsTaken {
        /// On each such member (by member, at most
        /// [`MAX_NAMED_PORT_CONFLICTS`]), the first port taken and its holder.
        taken: Vec<PortTaken>,
        /// How many such members there are in all.
        members: usize,
        /// Resources that fall short on the other capable members.
        short: BTreeSet<String>,
        /// Capable members already at the per-member limit.
        at_limit: usize,
    },
    /// Every capable member already holds the most instances allowed.
    PerMemberLimit {
        /// The plan's per-member limit.
        limit: u32,
        /// How many members are capable.
        capable: usize,
    },
}

impl fmt::Display for UnplacedReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UnplacedReason::NoCapableMember {
                ruled_out,
                unavailable,
            } => {
                f.write_str("no available member meets the requirements")?;
                for (requirement, count) in ruled_out {
                    write!(f, "; {requirement} rules out {count} available member(s)")?;
                }
                write!(f, "; {unavailable} member(s) unavailable")
            }
            UnplacedReason::NoRoom { short, at_limit } => {
                let short: Vec<&str> = short.iter().map(String::as_str).collect();
                write!(
                    f,
                    "no capable member has room: short of {}; {at_limit} capable member(s) at the per-member limit",
                    short.join(", ")
                )
            }
            UnplacedReason::PortsTaken {
                taken,
                members,
                short,
                at_limit,
            } => {
                f.write_str("every capable member with room has a port of the plan taken:")?;
                for (position, conflict) in taken.iter().enumerate() {
                    let separator = if position == 0 { " " } else { ", " };
                    write!(
                        f,
                        "{separator}{} on {} held by instance {}",
                        conflict.port, conflict.member, conflict.holder
                    )?;
                }
                if *members > taken.len() {
                    write!(f, " and {} more member(s)", members - taken.len())?;
                }
                if !short.is_empty() {
                    let short: Vec<&str> = short.iter().map(String::as_str).collect();
                    write!(f, "; other members short of {}", short.join(", "))?;
                }
                write!(f, "; {at_limit} capable member(s) at the per-member limit")
            }
            UnplacedReason::PerMemberLimit { limit, capable } => write!(
                f,
                "all {capable} capable member(s) already hold {limit} instance(s) of the plan (the per-member limit)"
            ),
        }
    }
}

/// An instance asked for that no member can hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnplacedInstance {
    /// The instance.
    pub instance: InstanceId,
    /// The member it was on, when it was displaced.
    pub previous: Option<MemberId>,
    /// Why it fits nowhere.
    pub reason: UnplacedReason,
}

impl fmt::Display for UnplacedInstance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "instance {} cannot be placed: {}",
            self.instance, self.reason
        )
    }
}

/// An instance in force that the target no longer has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemovedInstance {
    /// The instance.
    pub instance: InstanceId,
    /// The member it is on.
    pub member: MemberId,
}

/// The result of [`place_plan`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlanPlacement {
    /// Where each placed instance goes.
    pub target: BTreeMap<InstanceId, MemberId>,
    /// For each instance of `target`, whether it is kept, new or moved.
    pub changes: BTreeMap<InstanceId, InstanceChange>,
    /// Instances asked for that fit nowhere, by ordinal.
    pub unplaced: Vec<UnplacedInstance>,
    /// Instances in force that are not kept (scale-down victims), by ordinal.
    pub removed: Vec<RemovedInstance>,
}

/// Input [`place_plan`] refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// `max_per_member` is 0.
    #[error(
        "plan {plan:?}: at most 0 instances per member leaves nowhere to run; the limit must be at least 1"
    )]
    ZeroPerMemberLimit {
        /// The plan.
        plan: String,
    },
    /// More instances than [`MAX_INSTANCES`].
    #[error("plan {plan:?} asks for {requested} instances; at most {MAX_INSTANCES} are allowed")]
    TooManyInstances {
        /// The plan.
        plan: String,
        /// The count asked for.
        requested: u32,
    },
    /// Two members share an id.
    #[error("member {member} is listed more than once")]
    DuplicateMember {
        /// The repeated member.
        member: MemberId,
    },
    /// The placement in force names an instance of another plan.
    #[error("plan {plan:?}: the placement in force lists {instance}, an instance of another plan")]
    ForeignInstance {
        /// The plan.
        plan: String,
        /// The instance.
        instance: InstanceId,
    },
    /// Members declare one capability with two scores.
    #[error(transparent)]
    Catalogue(#[from] CatalogueConflict),
    /// A requirement cannot be evaluated.
    #[error(transparent)]
    Requirement(#[from] RequirementError),
}

/// The members, sorted, with what the plan holds on each as placement proceeds.
struct Board<'a> {
    members: Vec<&'a DeployMember>,
    position: BTreeMap<&'a MemberId, usize>,
    /// Whether each member is available and meets every requirement.
    eligible: Vec<bool>,
    /// Capacity left after reservations and this plan's instances so far.
    remaining: Vec<Resources>,
    /// Ports held on each member (by other plans, and this plan so far),
    /// with their holders.
    ports_held: Vec<BTreeMap<Port, InstanceId>>,
    /// This plan's instances on each member so far.
    held: Vec<u32>,
    /// `name_hash` of each member's pod name, for rendezvous ties.
    member_hashes: Vec<u64>,
    /// Index into `domain_hashes`/`domain_held` of each member's domain;
    /// domains are indexed in byte order of their names.
    domain_of: Vec<usize>,
    /// `name_hash` of each domain's name, for rendezvous ties.
    domain_hashes: Vec<u64>,
    /// This plan's instances in each domain so far.
    domain_held: Vec<u32>,
    demand: &'a Resources,
    ports: &'a BTreeSet<Port>,
    max_per_member: u32,
}

impl<'a> Board<'a> {
    fn new(
        request: &'a PlanRequest,
        requirements: &[ResolvedRequirement],
    ) -> Result<Board<'a>, PlanError> {
        let mut members: Vec<&DeployMember> = request.members.iter().collect();
        members.sort_by(|a, b| a.id.cmp(&b.id));
        if let Some(pair) = members.windows(2).find(|pair| pair[0].id == pair[1].id) {
            return Err(PlanError::DuplicateMember {
                member: pair[0].id.clone(),
            });
        }
        let eligible = members
            .iter()
            .map(|member| {
                member.available
                    && requirements
                        .iter()
                        .all(|requirement| requirement.is_met_by(&member.capabilities))
            })
            .collect();
        let remaining = members
            .iter()
            .map(|member| remaining_capacity(member, &request.reserved))
            .collect();
        let ports_held = members
            .iter()
            .map(|member| {
                request
                    .reserved
                    .get(&member.id)
                    .map(|reservation| reservation.ports.clone())
                    .unwrap_or_default()
            })
            .collect();
        let domains: BTreeSet<&str> = members
            .iter()
            .map(|member| member.update_domain.as_str())
            .collect();
        let domains: Vec<&str> = domains.into_iter().collect();
        Ok(Board {
            member_hashes: members
                .iter()
                .map(|member| name_hash(&member.id.pod_name()))
                .collect(),
            domain_of: members
                .iter()
                .map(|member| domains.binary_search(&member.update_domain.as_str()))
                // Always found: `domains` holds every member's domain.
                .map(|found| found.unwrap_or_default())
                .collect(),
            domain_hashes: domains.iter().map(|domain| name_hash(domain)).collect(),
            domain_held: vec![0; domains.len()],
            position: members
                .iter()
                .enumerate()
                .map(|(index, member)| (&member.id, index))
                .collect(),
            held: vec![0; members.len()],
            members,
            eligible,
            remaining,
            ports_held,
            demand: &request.demand,
            ports: &request.ports,
            max_per_member: request.max_per_member,
        })
    }

    /// Whether member `index` can hold one more instance, its ports counted
    /// as taken by every holder `blocks` accepts.
    fn can_hold_against(&self, index: usize, blocks: impl Fn(&InstanceId) -> bool) -> bool {
        self.eligible[index]
            && self.held[index] < self.max_per_member
            && self.remaining[index].fits(self.demand)
            && self.first_port_taken(index, blocks).is_none()
    }

    fn can_hold(&self, index: usize) -> bool {
        self.can_hold_against(index, |_| true)
    }

    /// The first of the plan's ports held on member `index` by a holder
    /// `blocks` accepts, with that holder.
    fn first_port_taken(
        &self,
        index: usize,
        blocks: impl Fn(&InstanceId) -> bool,
    ) -> Option<(Port, &InstanceId)> {
        self.ports.iter().find_map(|port| {
            self.ports_held[index]
                .get(port)
                .filter(|holder| blocks(holder))
                .map(|holder| (*port, holder))
        })
    }

    fn hold(&mut self, index: usize, instance: &InstanceId) {
        self.held[index] += 1;
        self.domain_held[self.domain_of[index]] += 1;
        self.remaining[index].take(self.demand);
        for port in self.ports {
            // A port held by an instance sorting after this one (kept
            // against it, see rule 1) passes to this one.
            self.ports_held[index].insert(*port, instance.clone());
        }
    }

    fn release(&mut self, index: usize, instance: &InstanceId) {
        self.held[index] -= 1;
        self.domain_held[self.domain_of[index]] -= 1;
        self.remaining[index].add(self.demand);
        self.ports_held[index].retain(|_, holder| holder != instance);
    }

    /// This plan's instances in the domain of member `index`.
    fn held_in_domain_of(&self, index: usize) -> u32 {
        self.domain_held[self.domain_of[index]]
    }
}

/// What one plan holds on members, for [`reserved_by`].
#[derive(Debug, Clone, Copy)]
pub struct PlanHolding<'a> {
    /// What each of its instances consumes.
    pub demand: &'a Resources,
    /// The ports each of its instances listens on.
    pub ports: &'a BTreeSet<Port>,
    /// Its placement in force.
    pub in_force: &'a BTreeMap<InstanceId, MemberId>,
    /// Its target placement.
    pub target: &'a BTreeMap<InstanceId, MemberId>,
}

/// The capacity and ports `plans` hold on each member, to pass as
/// [`PlanRequest::reserved`] when placing another plan. Each instance holds
/// its demand and its ports on its member in force and on its target member,
/// once on each distinct member: an instance being relocated holds both until
/// the old placement is removed (make-before-break), a settled one holds one.
/// A port two instances hold on one member (placed at the same time by two
/// passes) is named with the instance of lower name, whatever the order of
/// `plans`.
pub fn reserved_by(plans: &[PlanHolding<'_>]) -> BTreeMap<MemberId, Reservation> {
    let mut reserved: BTreeMap<MemberId, Reservation> = BTreeMap::new();
    for plan in plans {
        let held: BTreeSet<(&InstanceId, &MemberId)> =
            plan.in_force.iter().chain(plan.target.iter()).collect();
        for (instance, member) in held {
            let reservation = reserved.entry(member.clone()).or_default();
            reservation.resources.add(plan.demand);
            for port in plan.ports {
                let holder = reservation
                    .ports
                    .entry(*port)
                    .or_insert_with(|| instance.clone());
                if instance < holder {
                    *holder = instance.clone();
                }
            }
        }
    }
    reserved
}

/// The member's capacity minus what plans reserve on it (at least 0): what placement
/// starts from on each member, and what `kubectl shoal members` shows as remaining.
pub fn remaining_capacity(
    member: &DeployMember,
    reserved: &BTreeMap<MemberId, Reservation>,
) -> Resources {
    let mut remaining = member.capacity.clone();
    if let Some(reservation) = reserved.get(&member.id) {
        remaining.take(&reservation.resources);
    }
    remaining
}

/// Why `member` cannot hold an instance of the plan `request` describes,
/// in words; `None` when it can. The rule placement itself applies to every
/// member: it must be one of `request.members` and meet every requirement
/// (capacity and the per-member limit are weighed by [`place_plan`]). The
/// controller checks an operation's target with it when the operation is
/// approved and put in force, so an operation it did not plan (a hand edit
/// of the status) never places an instance where placement would not.
pub fn unfit_for(request: &PlanRequest, member: &MemberId) -> Option<String> {
    let Some(candidate) = request
        .members
        .iter()
        .find(|candidate| &candidate.id == member)
    else {
        return Some(format!("{member} is not a member of the Swarm"));
    };
    let catalogue = match Catalogue::build(
        request
            .members
            .iter()
            .map(|member| (&member.id, &member.capabilities)),
    ) {
        Ok(catalogue) => catalogue,
        Err(conflict) => return Some(conflict.to_string()),
    };
    let requirements = match resolve_all(&request.requirements, &catalogue) {
        Ok(requirements) => requirements,
        Err(error) => return Some(error.to_string()),
    };
    requirements
        .iter()
        .find(|requirement| !requirement.is_met_by(&candidate.capabilities))
        .map(|requirement| {
            let offers = candidate.capabilities.to_string();
            format!(
                "{member} does not meet the requirement {} (it offers {})",
                requirement.requirement,
                if offers.is_empty() {
                    "no capabilities".to_owned()
                } else {
                    offers
                }
            )
        })
}

/// Places the instances of one plan by the rules of the module docs. Fails
/// only on input that cannot be evaluated (see [`PlanError`]); instances
/// that fit nowhere are reported in [`PlanPlacement::unplaced`].
pub fn place_plan(request: &PlanRequest) -> Result<PlanPlacement, PlanError> {
    validate(request)?;
    let catalogue = Catalogue::build(
        request
            .members
            .iter()
            .map(|member| (&member.id, &member.capabilities)),
    )?;
    let requirements = resolve_all(&request.requirements, &catalogue)?;
    let mut board = Board::new(request, &requirements)?;
    let mut placement = PlanPlacement::default();
    let (kept, displaced) = keep_sticky(&mut board, &request.in_force);
    for (instance, index) in &kept {
        placement
            .target
            .insert(instance.clone(), board.members[*index].id.clone());
        placement
            .changes
            .insert(instance.clone(), InstanceChange::Kept);
    }
    let wanted = request.instances as usize;
    if kept.len() >= wanted {
        let excess = kept.len() - wanted;
        remove_all(&mut placement, displaced);
        shed_victims(&mut board, &mut placement, kept, excess);
    } else {
        let missing = wanted - kept.len();
        let mut placer = Placer {
            board,
            placement,
            requirements: &requirements,
        };
        placer.fill(request, displaced, missing);
        placement = placer.placement;
    }
    Ok(placement)
}

/// Rule 3: what places instances one by one.
struct Placer<'a, 'r> {
    board: Board<'a>,
    placement: PlanPlacement,
    requirements: &'r [ResolvedRequirement],
}

impl Placer<'_, '_> {
    /// Places `missing` instances: displaced ones first (lowest ordinals;
    /// the rest are removed), then new ones at the lowest free ordinals.
    fn fill(
        &mut self,
        request: &PlanRequest,
        displaced: Vec<(InstanceId, MemberId)>,
        missing: usize,
    ) {
        let (to_replace, excess) = displaced.split_at(missing.min(displaced.len()));
        remove_all(&mut self.placement, excess.to_vec());
        for (instance, from) in to_replace {
            self.place_one(instance, Some(from));
        }
        let used: BTreeSet<u32> = request.in_force.keys().map(|id| id.ordinal).collect();
        for ordinal in free_ordinals(&used, missing - to_replace.len()) {
            self.place_one(&InstanceId::new(&request.plan, ordinal), None);
        }
    }

    /// One instance: the emptiest domain with a member that can hold it,
    /// then that domain's emptiest such member; ties by rendezvous score.
    fn place_one(&mut self, instance: &InstanceId, previous: Option<&MemberId>) {
        let board = &mut self.board;
        let Some(index) = choose_member(board, instance) else {
            self.placement.unplaced.push(UnplacedInstance {
                instance: instance.clone(),
                previous: previous.cloned(),
                reason: unplaced_reason(board, self.requirements),
            });
            return;
        };
        board.hold(index, instance);
        let member = board.members[index].id.clone();
        let change = match previous {
            Some(from) if *from != member => InstanceChange::Moved { from: from.clone() },
            Some(_) => InstanceChange::Kept,
            None => InstanceChange::New,
        };
        self.placement.target.insert(instance.clone(), member);
        self.placement.changes.insert(instance.clone(), change);
    }
}

fn validate(request: &PlanRequest) -> Result<(), PlanError> {
    let plan = || request.plan.clone();
    if request.max_per_member == 0 {
        return Err(PlanError::ZeroPerMemberLimit { plan: plan() });
    }
    if request.instances > MAX_INSTANCES {
        return Err(PlanError::TooManyInstances {
            plan: plan(),
            requested: request.instances,
        });
    }
    match request.in_force.keys().find(|id| id.plan != request.plan) {
        Some(instance) => Err(PlanError::ForeignInstance {
            plan: plan(),
            instance: instance.clone(),
        }),
        None => Ok(()),
    }
}

/// Rule 1: keeps, in ordinal order, every instance whose member can still
/// hold it (a port held there by another plan's instance counts only when
/// that instance's name sorts before this one's); returns the kept ones
/// (instance → member index) and the displaced ones with their previous
/// member, by ordinal.
fn keep_sticky(
    board: &mut Board<'_>,
    in_force: &BTreeMap<InstanceId, MemberId>,
) -> (BTreeMap<InstanceId, usize>, Vec<(InstanceId, MemberId)>) {
    let mut kept = BTreeMap::new();
    let mut displaced = Vec::new();
    for (instance, member) in in_force {
        match board.position.get(member).copied() {
            Some(index) if board.can_hold_against(index, |holder| holder < instance) => {
                board.hold(index, instance);
                kept.insert(instance.clone(), index);
            }
            _ => displaced.push((instance.clone(), member.clone())),
        }
    }
    (kept, displaced)
}

fn remove_all(placement: &mut PlanPlacement, instances: Vec<(InstanceId, MemberId)>) {
    for (instance, member) in instances {
        placement.removed.push(RemovedInstance { instance, member });
    }
}

/// Rule 2: removes `count` kept instances, each time the one whose domain,
/// then member, holds the most instances, then the highest ordinal.
fn shed_victims(
    board: &mut Board<'_>,
    placement: &mut PlanPlacement,
    mut kept: BTreeMap<InstanceId, usize>,
    count: usize,
) {
    for _ in 0..count {
        let victim = kept
            .iter()
            .max_by_key(|(instance, index)| {
                (
                    board.held_in_domain_of(**index),
                    board.held[**index],
                    instance.ordinal,
                )
            })
            .map(|(instance, index)| (instance.clone(), *index));
        let Some((instance, index)) = victim else {
            return;
        };
        kept.remove(&instance);
        board.release(index, &instance);
        placement.target.remove(&instance);
        placement.changes.remove(&instance);
        let member = board.members[index].id.clone();
        placement.removed.push(RemovedInstance { instance, member });
    }
    placement
        .removed
        .sort_by(|a, b| a.instance.cmp(&b.instance));
}

/// The `count` lowest ordinals not in `used`.
fn free_ordinals(used: &BTreeSet<u32>, count: usize) -> Vec<u32> {
    (0..=u32::MAX)
        .filter(|ordinal| !used.contains(ordinal))
        .take(count)
        .collect()
}

fn choose_member(board: &Board<'_>, instance: &InstanceId) -> Option<usize> {
    let instance_hash = key_hash(instance.to_string().as_bytes());
    let candidates: Vec<usize> = (0..board.members.len())
        .filter(|index| board.can_hold(*index) && !board.members[*index].cordoned)
        .collect();
    let domain = candidates
        .iter()
        .map(|index| board.domain_of[*index])
        .min_by_key(|domain| {
            let score = mix(instance_hash, board.domain_hashes[*domain]);
            (board.domain_held[*domain], Reverse(score), *domain)
        })?;
    candidates
        .into_iter()
        .filter(|index| board.domain_of[*index] == domain)
        .min_by_key(|index| {
            let score = mix(instance_hash, board.member_hashes[*index]);
            (board.held[*index], Reverse(score), *index)
        })
}

/// Why no member can hold another instance (rule 4).
fn unplaced_reason(board: &Board<'_>, requirements: &[ResolvedRequirement]) -> UnplacedReason {
    let capable: Vec<usize> = (0..board.members.len())
        .filter(|index| board.eligible[*index])
        .collect();
    if capable.is_empty() {
        return no_capable_member(board, requirements);
    }
    let under_limit: Vec<usize> = capable
        .iter()
        .copied()
        .filter(|index| board.held[*index] < board.max_per_member)
        .collect();
    if under_limit.is_empty() {
        return UnplacedReason::PerMemberLimit {
            limit: board.max_per_member,
            capable: capable.len(),
        };
    }
    let at_limit = capable.len() - under_limit.len();
    let (roomy, roomless): (Vec<usize>, Vec<usize>) = under_limit
        .iter()
        .partition(|index| board.remaining[**index].fits(board.demand));
    let short = roomless
        .iter()
        .flat_map(|index| {
            let remaining = &board.remaining[*index];
            board
                .demand
                .0
                .iter()
                .filter(|(name, amount)| remaining.get(name) < **amount)
                .map(|(name, _)| name.clone())
        })
        .collect();
    if roomy.is_empty() {
        return UnplacedReason::NoRoom { short, at_limit };
    }
    // Every member with room has a port taken (else it could hold the instance).
    let taken = roomy
        .iter()
        .filter_map(|index| {
            board
                .first_port_taken(*index, |_| true)
                .map(|(port, holder)| PortTaken {
                    member: board.members[*index].id.clone(),
                    port,
                    holder: holder.clone(),
                })
        })
        .take(MAX_NAMED_PORT_CONFLICTS)
        .collect();
    UnplacedReason::PortsTaken {
        taken,
        members: roomy.len(),
        short,
        at_limit,
    }
}

fn no_capable_member(board: &Board<'_>, requirements: &[ResolvedRequirement]) -> UnplacedReason {
    let available: Vec<&DeployMember> = board
        .members
        .iter()
        .copied()
        .filter(|member| member.available)
        .collect();
    let ruled_out = requirements
        .iter()
        .map(|requirement| {
            let count = available
                .iter()
                .filter(|member| !requirement.is_met_by(&member.capabilities))
                .count();
            (requirement.requirement.clone(), count)
        })
        .filter(|(_, count)| *count > 0)
        .collect();
    UnplacedReason::NoCapableMember {
        ruled_out,
        unavailable: board.members.len() - available.len(),
    }
}
