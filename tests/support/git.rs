//! The one way tests make and change a Git repository: git2 (no `git` CLI needed), a `main`
//! branch, a fixed author, and commits of the whole working tree.

use std::path::Path;

use git2::build::CheckoutBuilder;
use git2::{BranchType, IndexAddOption, Repository, RepositoryInitOptions, Signature};

/// A Git repository with a working tree, `main` checked out.
pub struct GitRepo {
    repo: Repository,
}

impl GitRepo {
    /// Initialises a repository at `path` (created if missing), with `main` as its HEAD.
    pub fn init(path: &Path) -> Self {
        let mut options = RepositoryInitOptions::new();
        options.initial_head("main");
        let repo = Repository::init_opts(path, &options).expect("git init");
        Self { repo }
    }

    /// The working tree.
    pub fn path(&self) -> &Path {
        self.repo.workdir().expect("a repository with a working tree")
    }

    /// The `file://` URL of the repository.
    pub fn url(&self) -> String {
        format!("file://{}", self.path().display())
    }

    fn signature() -> Signature<'static> {
        Signature::now("poolctl tests", "tests@poolctl.invalid").expect("a signature")
    }

    /// Commits the whole working tree (additions, changes and deletions) on HEAD; returns the
    /// full commit id.
    pub fn commit(&self, message: &str) -> String {
        let mut index = self.repo.index().expect("the index");
        index.add_all(["*"], IndexAddOption::DEFAULT, None).expect("git add");
        index.update_all(["*"], None).expect("git add -u");
        index.write().expect("write the index");
        let tree = self.repo.find_tree(index.write_tree().expect("write the tree")).expect("the tree");
        let parent = self.repo.head().ok().and_then(|h| h.peel_to_commit().ok());
        let parents: Vec<_> = parent.iter().collect();
        let signature = Self::signature();
        let id = self.repo.commit(Some("HEAD"), &signature, &signature, message, &tree, &parents);
        id.expect("git commit").to_string()
    }

    fn head(&self) -> git2::Commit<'_> {
        self.repo.head().and_then(|h| h.peel_to_commit()).expect("a HEAD commit")
    }

    /// Creates branch `name` at HEAD and checks it out.
    pub fn switch_new_branch(&self, name: &str) {
        self.repo.branch(name, &self.head(), false).expect("git branch");
        self.switch(name);
    }

    /// Checks out branch `name`.
    pub fn switch(&self, name: &str) {
        let refname = format!("refs/heads/{name}");
        let object = self.repo.revparse_single(&refname).expect("the branch");
        self.repo.checkout_tree(&object, Some(CheckoutBuilder::new().force())).expect("git checkout");
        self.repo.set_head(&refname).expect("set HEAD");
    }

    /// Deletes branch `name`.
    pub fn delete_branch(&self, name: &str) {
        self.repo.find_branch(name, BranchType::Local).and_then(|mut b| b.delete()).expect("git branch -D");
    }

    /// Points the lightweight tag `name` at HEAD, moving it if it exists.
    pub fn tag(&self, name: &str) {
        self.repo.tag_lightweight(name, self.head().as_object(), true).expect("git tag");
    }

    /// Creates the annotated tag `name` at HEAD.
    pub fn tag_annotated(&self, name: &str, message: &str) {
        let signature = Self::signature();
        self.repo.tag(name, self.head().as_object(), &signature, message, false).expect("git tag -a");
    }
}
