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
    pub tracepoints: Option<Spanned<Vec<Spanned<RawTracepoint>>>>,
    pub probes: Option<Spanned<Vec<Spanned<RawProbe>>>>,
    /// Signed, like `max_cgroups`, so that a bad value gets a positioned
    /// range error from the validator.
    pub ring_pages: Option<Spanned<i64>>,
    pub cgroups: Option<Spanned<Vec<Spanned<RawSelector>>>>,
    /// Signed, so that `-5` reaches the validator and gets a positioned
    /// "must be at least 1" rather than a generic type error.
    pub max_cgroups: Option<Spanned<i64>>,
    pub labels: Option<TextList>,
    pub otlp: Option<Spanned<RawOtlp>>,
    pub backend: Option<Text>,
    pub metrics: Option<Spanned<Vec<Spanned<RawMetricItem>>>>,
    pub host: Option<Spanned<RawHost>>,
    pub processes: Option<Spanned<Vec<Spanned<RawProcess>>>>,
    /// Signed, like `max_cgroups`.
    pub max_processes: Option<Spanned<i64>>,
    pub energy: Option<Spanned<RawEnergy>>,
}

/// The `energy:` section.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawEnergy {
    pub meter: Option<Text>,
    pub model: Option<Spanned<RawModel>>,
    pub idle: Option<Text>,
}

/// `energy.model:`: a declared power model.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawModel {
    pub per: Option<Text>,
    pub idle_watts: Option<Spanned<f64>>,
    pub max_watts: Option<Spanned<f64>>,
}

/// One `processes:` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawProcess {
    pub name: Option<Text>,
    pub comm: Option<Text>,
    pub exe: Option<Text>,
    pub cmdline: Option<Text>,
    /// Signed, so that a bad value gets a positioned error.
    pub pid: Option<Spanned<i64>>,
    pub groups: Option<TextList>,
    pub tracepoints: Option<TextList>,
    pub probes: Option<TextList>,
    pub metrics: Option<TextList>,
    pub labels: Option<TextList>,
}

/// The `host:` section: groups and tracepoints counted once for the whole
/// machine, and metrics over them.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawHost {
    pub groups: Option<Spanned<RawGroups>>,
    pub tracepoints: Option<Spanned<Vec<Spanned<RawTracepoint>>>>,
    pub metrics: Option<Spanned<Vec<Spanned<RawMetricItem>>>>,
}

/// One `metrics:` entry: the name of a metric or metric group of the CPU's
/// tables (`- IPC`), or a mapping (`- name: ...`, with `expr:` for a metric
/// of the config's own).
pub(crate) type RawMetricItem = NameOr<RawMetric>;

/// The mapping form of a `metrics:` entry; without `expr`, `name` is a
/// metric or metric group of the CPU's tables.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMetric {
    pub name: Text,
    pub expr: Option<Text>,
    pub description: Option<Text>,
    pub unit: Option<Text>,
}

/// A `metrics:` entry as a mapping (`- IPC` is `- name: IPC`).
pub(crate) fn metric_entry(item: Spanned<RawMetricItem>) -> RawMetric {
    match item.value {
        RawMetricItem::Entry(entry) => *entry,
        RawMetricItem::Name(value) => RawMetric {
            name: Text {
                value,
                referenced: item.referenced,
                defined: item.defined,
            },
            expr: None,
            description: None,
            unit: None,
        },
    }
}

impl RawMetricItem {
    /// The entry's name as written.
    pub(crate) fn name(&self) -> &str {
        match self {
            Self::Entry(entry) => &entry.name.value,
            Self::Name(name) => name,
        }
    }
}

impl Expecting for RawMetric {
    const EXPECTING: &'static str = "a metric or metric group of the CPU's tables (`IPC`), or a mapping with `name:` and `expr:`";
}

/// A list entry written as a name alone, or as a mapping that adds to it.
#[derive(Debug)]
pub(crate) enum NameOr<T> {
    /// `- NAME`
    Name(String),
    /// `- name: ...` with more.
    Entry(Box<T>),
}

/// What a [`NameOr`] list entry is, for the error of one that is neither.
pub(crate) trait Expecting {
    const EXPECTING: &'static str;
}

impl<'de, T: Deserialize<'de> + Expecting> Deserialize<'de> for NameOr<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct EntryVisitor<T>(std::marker::PhantomData<T>);

        impl<'de, T: Deserialize<'de> + Expecting> Visitor<'de> for EntryVisitor<T> {
            type Value = NameOr<T>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(T::EXPECTING)
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<NameOr<T>, E> {
                Ok(NameOr::Name(v.to_owned()))
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<NameOr<T>, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(|entry| NameOr::Entry(Box::new(entry)))
            }
        }

        deserializer.deserialize_any(EntryVisitor(std::marker::PhantomData))
    }
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
    pub probes: Option<TextList>,
    pub metrics: Option<TextList>,
}

/// One `tracepoints:` entry: `subsys:name`, or a mapping that adds a
/// filter, a label name or counting by field values.
pub(crate) type RawTracepoint = NameOr<RawTracepointEntry>;

/// The mapping form of a `tracepoints:` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTracepointEntry {
    pub name: Text,
    pub filter: Option<Text>,
    #[serde(rename = "as")]
    pub label: Option<Text>,
    pub by: Option<TextList>,
    /// Signed, so that `0` or `-1` get a positioned range error.
    pub max_series: Option<Spanned<i64>>,
    /// The `by:` field that holds a syscall number.
    pub syscall_name: Option<Text>,
}

impl Expecting for RawTracepointEntry {
    const EXPECTING: &'static str = "a tracepoint `subsystem:name` or a mapping with `name:`";
}

/// One `probes:` entry: exactly one of `uprobe:` and `kprobe:`, and `as:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawProbe {
    pub uprobe: Option<Text>,
    pub kprobe: Option<Text>,
    #[serde(rename = "as")]
    pub label: Option<Text>,
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
