//! Filter-and-capacity placement of plan instances on members.
//!
//! Each work item names the capabilities it requires and the resources it
//! demands. For each item, the *eligible* members are the available ones that
//! offer every required capability; they are ranked by rendezvous score
//! `mix(key_hash(item id), name_hash("<pool>-<ordinal>"))`, highest first, and
//! the first one with enough remaining capacity for every demanded resource
//! wins. Items are processed in id byte order, so the result depends neither
//! on input order nor on anything but the items and members. Rendezvous
//! ranking means adding or removing one member only moves items whose top
//! eligible choice changed (plus capacity knock-on effects).

use std::collections::{BTreeMap, BTreeSet};

use crate::hash::{key_hash, mix, name_hash};
use crate::member::{Member, MemberId, Resources};

/// One item to place, e.g. a plan instance `plan/deployment/3`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkItem {
    /// Unique id of the item.
    pub id: String,
    /// Capabilities a member must offer.
    pub requires: BTreeSet<String>,
    /// Resources the item consumes on its member.
    pub demand: Resources,
}

impl WorkItem {
    /// An item with no requirements and no demand.
    pub fn new(id: impl Into<String>) -> WorkItem {
        WorkItem {
            id: id.into(),
            requires: BTreeSet::new(),
            demand: Resources::none(),
        }
    }

    /// The same item requiring one more capability.
    pub fn requiring(mut self, capability: impl Into<String>) -> WorkItem {
        self.requires.insert(capability.into());
        self
    }

    /// The same item demanding `amount` of `resource`.
    pub fn demanding(mut self, resource: impl Into<String>, amount: u64) -> WorkItem {
        self.demand = self.demand.with(resource, amount);
        self
    }
}

/// Why an item could not be placed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unplaceable {
    /// No available member offers every required capability.
    #[error("item {item:?}: no available member offers capabilities {missing:?}")]
    NoCapableMember {
        /// The item.
        item: String,
        /// Its required capabilities.
        missing: BTreeSet<String>,
    },
    /// Capable members exist, but none has room left for the demand.
    #[error("item {item:?}: none of the {capable} capable members has room for {demand:?}")]
    NoRoom {
        /// The item.
        item: String,
        /// How many members were capable.
        capable: usize,
        /// The item's demand.
        demand: BTreeMap<String, u64>,
    },
}

/// Invalid placement input, or items that fit nowhere.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    /// Two items share an id.
    #[error("work item {item:?} is listed more than once")]
    DuplicateItem {
        /// The repeated id.
        item: String,
    },
    /// Two members share an id.
    #[error("member {member} is listed more than once")]
    DuplicateMember {
        /// The repeated member.
        member: MemberId,
    },
    /// Some items could not be placed; every one is listed with its reason.
    #[error("{} work item(s) cannot be placed: {}", .0.len(), join(.0))]
    Unplaceable(Vec<Unplaceable>),
}

fn join(items: &[Unplaceable]) -> String {
    items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Where each item went.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placement {
    /// Item id → member.
    pub placed: BTreeMap<String, MemberId>,
    /// Items that fit nowhere, in id order.
    pub unplaced: Vec<Unplaceable>,
}

impl Placement {
    /// `Ok` with the item → member map when every item was placed.
    pub fn into_result(self) -> Result<BTreeMap<String, MemberId>, PlacementError> {
        if self.unplaced.is_empty() {
            Ok(self.placed)
        } else {
            Err(PlacementError::Unplaceable(self.unplaced))
        }
    }
}

/// Places every item it can (see the module docs); items that fit nowhere are
/// listed in [`Placement::unplaced`] with a typed reason. Fails only on
/// duplicate item or member ids.
pub fn place(items: &[WorkItem], members: &[Member]) -> Result<Placement, PlacementError> {
    let mut sorted_items: Vec<&WorkItem> = items.iter().collect();
    sorted_items.sort_by(|a, b| a.id.cmp(&b.id));
    if let Some(pair) = sorted_items
        .windows(2)
        .find(|pair| pair[0].id == pair[1].id)
    {
        return Err(PlacementError::DuplicateItem {
            item: pair[0].id.clone(),
        });
    }
    let mut sorted_members: Vec<&Member> = members.iter().collect();
    sorted_members.sort_by(|a, b| a.id.cmp(&b.id));
    if let Some(pair) = sorted_members
        .windows(2)
        .find(|pair| pair[0].id == pair[1].id)
    {
        return Err(PlacementError::DuplicateMember {
            member: pair[0].id.clone(),
        });
    }
    let member_hashes: Vec<u64> = sorted_members
        .iter()
        .map(|member| name_hash(&member.id.to_string()))
        .collect();
    let mut remaining: Vec<Resources> = sorted_members
        .iter()
        .map(|member| member.capacity.clone())
        .collect();
    let mut placement = Placement::default();
    for item in sorted_items {
        let item_hash = key_hash(item.id.as_bytes());
        let mut ranked: Vec<(u64, usize)> = sorted_members
            .iter()
            .enumerate()
            .filter(|(_, member)| member.available && item.requires.is_subset(&member.capabilities))
            .map(|(index, _)| (mix(item_hash, member_hashes[index]), index))
            .collect();
        if ranked.is_empty() {
            placement.unplaced.push(Unplaceable::NoCapableMember {
                item: item.id.clone(),
                missing: item.requires.clone(),
            });
            continue;
        }
        // Highest score first; equal scores (a 64-bit collision) by member order.
        ranked.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        match ranked
            .iter()
            .find(|(_, index)| remaining[*index].fits(&item.demand))
        {
            Some(&(_, index)) => {
                remaining[index].take(&item.demand);
                placement
                    .placed
                    .insert(item.id.clone(), sorted_members[index].id.clone());
            }
            None => placement.unplaced.push(Unplaceable::NoRoom {
                item: item.id.clone(),
                capable: ranked.len(),
                demand: item.demand.0.clone(),
            }),
        }
    }
    Ok(placement)
}
