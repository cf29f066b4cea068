//! Desired state: the validated pools a source declares, and where they were read from.

use serde::{Deserialize, Serialize};

use crate::spec::{CopiedFrom, Pool, escape_controls};

/// Where the desired state was read from, as shown in the plan header and container labels.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Origin {
    /// A single file or a directory on disk.
    Path { path: String },
    /// A path inside one commit of a Git repository.
    Git {
        url: String,
        /// What the user asked for (`HEAD` when none).
        reference: String,
        /// The full commit id that was read.
        commit: String,
        /// The path inside the repository (`""` for the root).
        path: String,
    },
}

impl Origin {
    /// Identifies the source independently of the commit: pools that carry this scope and are no
    /// longer declared are the ones `--prune` may remove.
    pub fn scope(&self) -> String {
        match self {
            Self::Path { path } => format!("path:{path}"),
            Self::Git { url, path, .. } => format!("git:{url}//{path}"),
        }
    }

    /// Whether `scope` (another source's, as a container's label records it) may be this source
    /// spelled another way: a directory and a pool file (or directory) within it. A directory
    /// source reads every pool file under it, and a pool is declared once in a source, so a
    /// pool both declare is one declaration, whichever spelling created its containers.
    /// Nothing else is shared: a pool only the other spelling declares is neither undeclared
    /// here nor pruned.
    pub fn spells(&self, scope: &str) -> bool {
        if scope == self.scope() {
            return true;
        }
        let Self::Path { path } = self else { return false };
        let Some(other) = scope.strip_prefix("path:") else { return false };
        let within = |dir: &str, file: &str| {
            file.strip_prefix(dir)
                .and_then(|rest| rest.strip_prefix('/'))
                .is_some_and(|name| !name.is_empty())
        };
        other == path || within(path, other) || within(other, path)
    }

    /// The commit id, for Git sources.
    pub fn commit(&self) -> Option<&str> {
        match self {
            Self::Path { .. } => None,
            Self::Git { commit, .. } => Some(commit),
        }
    }
}

impl std::fmt::Display for Origin {
    /// With control characters escaped: a directory's name or a ref may come from anywhere.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Path { path } => f.write_str(&escape_controls(path)),
            Self::Git { url, reference, commit, path } => {
                let short = commit.get(..7).unwrap_or(commit);
                write!(f, "{} @ {} ({short})", escape_controls(url), escape_controls(reference))?;
                if !path.is_empty() {
                    write!(f, " path {}", escape_controls(path))?;
                }
                Ok(())
            }
        }
    }
}

/// A validated pool, with where it was declared and its template hash.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DesiredPool {
    pub pool: Pool,
    /// The file that declares it, relative to the source root.
    pub file: String,
    pub template_hash: String,
    /// The container `spec.template.copyFrom` named, once its settings were copied into the
    /// template (see [`crate::backend::docker::resolve_copies`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub copied_from: Option<CopiedFrom>,
}

impl DesiredPool {
    pub fn name(&self) -> &str {
        &self.pool.metadata.name
    }

    /// The cluster its `node:` section names: `None` for a pool of containers only.
    pub fn cluster(&self) -> Option<super::ClusterRef> {
        let node = self.pool.spec.node.as_ref()?;
        Some(super::ClusterRef { kubeconfig: node.kubeconfig.clone(), context: node.context.clone() })
    }

    /// How many env values of the template are `valueFrom`s.
    pub fn reads_secrets(&self) -> usize {
        let env = &self.pool.spec.template.env;
        env.values().filter(|v| matches!(v, crate::spec::EnvValue::Secret(_))).count()
    }
}

/// Everything a source declares, validated.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Desired {
    pub origin: Origin,
    pub pools: Vec<DesiredPool>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_and_a_pool_file_within_it_are_one_source_spelled_two_ways() {
        let dir = Origin::Path { path: "/srv/pools".into() };
        let file = Origin::Path { path: "/srv/pools/w.yaml".into() };
        assert!(dir.spells(&file.scope()) && file.spells(&dir.scope()));
        assert!(dir.spells(&dir.scope()));
        assert!(dir.spells("path:/srv/pools/sub/w.yaml") && dir.spells("path:/srv"), "nested, either way");
        for other in
            ["path:/srv/pools2/w.yaml", "path:/srv/pool", "path:/srv/poolsw.yaml", "git:/srv/pools//"]
        {
            assert!(!dir.spells(other), "{other}");
        }
        assert!(!file.spells("path:/srv/pools/x.yaml"), "a sibling file is another source");
        let git = Origin::Git {
            url: "u".into(),
            reference: "main".into(),
            commit: "c".into(),
            path: String::new(),
        };
        assert!(!git.spells("path:/srv/pools"));
        assert!(git.spells(&git.scope()));
    }
}
