//! Label selectors (`metav1.LabelSelector`) as the API server evaluates them, so that the drain
//! preview and the drain itself agree with the eviction subresource on which pods a
//! PodDisruptionBudget covers.

use std::collections::BTreeMap;

use serde::Serialize;

/// `matchLabels` and `matchExpressions` together: a pod matches when every requirement holds.
/// An empty selector matches every pod.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LabelSelector {
    pub requirements: Vec<Requirement>,
}

/// One requirement on one label.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Requirement {
    pub key: String,
    pub operator: Operator,
}

/// The operators of `matchExpressions`; a `matchLabels` entry is an `In` with one value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "operator", content = "values")]
pub enum Operator {
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    DoesNotExist,
}

impl LabelSelector {
    /// The selector the API server would make of a pool file's pod selector; `None` when it
    /// would refuse it. Here rather than in `spec`, which imports nothing of the model.
    pub fn of_pods(pods: &crate::spec::PodSelector) -> Option<Self> {
        Self::from_parts(
            &pods.match_labels,
            pods.match_expressions.iter().map(|e| (e.key.as_str(), e.operator.as_str(), e.values.as_slice())),
        )
    }

    /// Builds a selector from `matchLabels` and `matchExpressions` entries (key, operator as the
    /// API spells it, values). `None` when the API server could not turn it into a selector
    /// (`metav1.LabelSelectorAsSelector` fails): an unknown operator, `In` or `NotIn` without
    /// values, `Exists` or `DoesNotExist` with values. Such a selector selects nothing.
    pub fn from_parts<'a>(
        match_labels: impl IntoIterator<Item = (&'a String, &'a String)>,
        match_expressions: impl IntoIterator<Item = (&'a str, &'a str, &'a [String])>,
    ) -> Option<Self> {
        let labels = match_labels
            .into_iter()
            .map(|(k, v)| Requirement { key: k.clone(), operator: Operator::In(vec![v.clone()]) });
        let mut requirements: Vec<Requirement> = labels.collect();
        for (key, operator, values) in match_expressions {
            let operator = match (operator, values.is_empty()) {
                ("In", false) => Operator::In(values.to_vec()),
                ("NotIn", false) => Operator::NotIn(values.to_vec()),
                ("Exists", true) => Operator::Exists,
                ("DoesNotExist", true) => Operator::DoesNotExist,
                _ => return None,
            };
            requirements.push(Requirement { key: key.to_owned(), operator });
        }
        Some(Self { requirements })
    }

    /// Whether a set of labels satisfies every requirement. `NotIn` and `DoesNotExist` hold
    /// for a label that is absent, as in the API server.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| {
            let value = labels.get(&r.key);
            match &r.operator {
                Operator::In(values) => value.is_some_and(|v| values.contains(v)),
                Operator::NotIn(values) => value.is_none_or(|v| !values.contains(v)),
                Operator::Exists => value.is_some(),
                Operator::DoesNotExist => value.is_none(),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    fn expr<'a>(key: &'a str, op: &'a str, values: &'a [String]) -> (&'a str, &'a str, &'a [String]) {
        (key, op, values)
    }

    fn values(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn every_operator_matches_as_the_api_server_does() {
        let (web_api, canary) = (values(&["web", "api"]), values(&["canary"]));
        let sel = LabelSelector::from_parts(
            &labels(&[("team", "a")]),
            [expr("app", "In", &web_api), expr("track", "NotIn", &canary), expr("tier", "Exists", &[])],
        )
        .unwrap();
        assert!(sel.matches(&labels(&[("team", "a"), ("app", "web"), ("tier", "x")])));
        assert!(sel.matches(&labels(&[("team", "a"), ("app", "api"), ("tier", ""), ("track", "stable")])));
        assert!(!sel.matches(&labels(&[("team", "b"), ("app", "web"), ("tier", "x")])), "matchLabels");
        assert!(!sel.matches(&labels(&[("team", "a"), ("app", "db"), ("tier", "x")])), "In");
        assert!(!sel.matches(&labels(&[("team", "a"), ("tier", "x")])), "In needs the label");
        let canary_pod = labels(&[("team", "a"), ("app", "web"), ("tier", "x"), ("track", "canary")]);
        assert!(!sel.matches(&canary_pod), "NotIn");
        assert!(!sel.matches(&labels(&[("team", "a"), ("app", "web")])), "Exists");

        let absent =
            LabelSelector::from_parts(&BTreeMap::new(), [expr("legacy", "DoesNotExist", &[])]).unwrap();
        assert!(absent.matches(&labels(&[("app", "web")])));
        assert!(!absent.matches(&labels(&[("legacy", "")])), "an empty value still exists");
    }

    #[test]
    fn an_empty_selector_matches_every_set_of_labels() {
        let sel = LabelSelector::from_parts(&BTreeMap::new(), []).unwrap();
        assert!(sel.matches(&BTreeMap::new()));
        assert!(sel.matches(&labels(&[("app", "web")])));
    }

    #[test]
    fn a_selector_the_api_server_cannot_parse_is_refused() {
        let none: &[String] = &[];
        let web = values(&["web"]);
        for bad in [
            expr("app", "In", none),
            expr("app", "NotIn", none),
            expr("app", "Exists", &web),
            expr("app", "DoesNotExist", &web),
            expr("app", "Equals", &web),
        ] {
            assert_eq!(LabelSelector::from_parts(&BTreeMap::new(), [bad]), None, "{bad:?}");
        }
    }
}
