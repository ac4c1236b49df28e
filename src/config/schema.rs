//! The YAML file as written, before validation.
//!
//! Every value the validator may complain about is `Spanned`, so semantic
//! errors can point at its line and column. `deny_unknown_fields` turns typos
//! into errors instead of silently ignored settings.

use std::fmt;

use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_saphyr::Spanned;

/// A string with its position.
pub(crate) type Text = Spanned<String>;
/// A list of strings with the list's position and each item's.
pub(crate) type TextList = Spanned<Vec<Text>>;

/// The top-level mapping. Keys absent or `null` take their defaults.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawConfig {
    pub interval: Option<Text>,
    pub per_cpu: Option<bool>,
    pub groups: Option<Spanned<RawGroups>>,
    pub tracepoints: Option<TextList>,
    pub cgroups: Option<Spanned<Vec<Spanned<RawSelector>>>>,
    /// Signed, so that `-5` reaches the validator and gets a positioned
    /// "must be at least 1" rather than a generic type error.
    pub max_cgroups: Option<Spanned<i64>>,
    pub labels: Option<TextList>,
}

/// One `cgroups:` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSelector {
    pub path: Option<Text>,
    #[serde(rename = "match")]
    pub glob: Option<Text>,
    pub groups: Option<TextList>,
    pub tracepoints: Option<TextList>,
}

/// `groups:` keeps the written order (it decides the order of groups in the
/// daemon and its output) and the position of every name, which a map type
/// would lose. Duplicate names are rejected by the YAML layer.
#[derive(Debug, Default)]
pub(crate) struct RawGroups(pub Vec<(Text, TextList)>);

impl<'de> Deserialize<'de> for RawGroups {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct GroupsVisitor;

        impl<'de> Visitor<'de> for GroupsVisitor {
            type Value = RawGroups;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping from group name to a list of events")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawGroups, A::Error> {
                let mut groups = Vec::new();
                while let Some(name) = map.next_key::<Text>()? {
                    groups.push((name, map.next_value::<TextList>()?));
                }
                Ok(RawGroups(groups))
            }
        }

        deserializer.deserialize_map(GroupsVisitor)
    }
}
