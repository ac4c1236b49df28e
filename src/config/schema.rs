//! The YAML file as written, before validation.
//!
//! Every value the validator may complain about is `Spanned`, so semantic
//! errors can point at its line and column. `deny_unknown_fields` turns typos
//! into errors instead of silently ignored settings.

use std::fmt;
use std::marker::PhantomData;

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
    pub otlp: Option<Spanned<RawOtlp>>,
}

/// The `otlp:` section; every key may be left to the environment or the
/// defaults.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawOtlp {
    pub endpoint: Option<Text>,
    pub protocol: Option<Text>,
    pub interval: Option<Text>,
    pub timeout: Option<Text>,
    pub headers: Option<Spanned<Ordered<Text>>>,
    pub resource: Option<Spanned<Ordered<Text>>>,
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

/// `groups:` maps group names to their events.
pub(crate) type RawGroups = Ordered<TextList>;

/// A mapping with user-chosen keys (`groups:`, `otlp.headers:`) that keeps
/// the written order (for `groups:` it decides the order of groups in the
/// daemon and its output) and the position of every key, which a map type
/// would lose. Duplicate keys are rejected by the YAML layer.
#[derive(Debug)]
pub(crate) struct Ordered<V>(pub Vec<(Text, V)>);

impl<'de, V: Deserialize<'de>> Deserialize<'de> for Ordered<V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct OrderedVisitor<V>(PhantomData<V>);

        impl<'de, V: Deserialize<'de>> Visitor<'de> for OrderedVisitor<V> {
            type Value = Ordered<V>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Ordered<V>, A::Error> {
                let mut entries = Vec::new();
                while let Some(key) = map.next_key::<Text>()? {
                    entries.push((key, map.next_value::<V>()?));
                }
                Ok(Ordered(entries))
            }
        }

        deserializer.deserialize_map(OrderedVisitor(PhantomData))
    }
}
