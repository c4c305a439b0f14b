//! The `policy new` scaffolds: a ready-to-build policy project per language.
//!
//! Each template is a directory of the repository, `templates/policy-<lang>/`,
//! embedded file by file at build time (the build script lists the files;
//! nothing is kept as a string literal here). Writing a project copies every
//! file; a file whose name ends in `.tmpl` has its placeholders filled
//! ([`Placeholders`]) and loses the suffix; `build.sh` is made executable. The
//! policy contract, `wit/policy.wit`, is copied from the one this binary
//! implements.

use std::path::{Path, PathBuf};

use clap::ValueEnum;

include!(concat!(env!("OUT_DIR"), "/templates.rs"));

/// The policy contract this binary implements, copied into every project.
pub const WIT: &str = include_str!("../../../wit/policy.wit");

/// Where the contract goes in a project.
pub const WIT_PATH: &str = "wit/policy.wit";

/// A language `policy new` scaffolds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Lang {
    /// Rust, built with cargo for wasm32-wasip2 and wit-bindgen.
    Rust,
    /// Python, built with componentize-py.
    Python,
    /// JavaScript, built with componentize-js (npm).
    Js,
}

impl Lang {
    /// Every language, in the order `policy new --help` lists them.
    pub const ALL: [Lang; 3] = [Lang::Rust, Lang::Python, Lang::Js];

    /// The template directory under `templates/`.
    pub fn template(self) -> &'static str {
        match self {
            Lang::Rust => "policy-rust",
            Lang::Python => "policy-python",
            Lang::Js => "policy-js",
        }
    }

    /// The name used on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Lang::Rust => "rust",
            Lang::Python => "python",
            Lang::Js => "js",
        }
    }
}

/// Why a project could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ScaffoldError {
    /// The name cannot name a package in every language.
    #[error(
        "policy name '{name}': {reason} (use 1 to 64 lowercase letters, digits, '-' or '_', starting with a letter)"
    )]
    BadName {
        /// The name given.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The target directory holds files already.
    #[error("{}: exists and is not empty; pick another name or --dir", .path.display())]
    NotEmpty {
        /// The directory.
        path: PathBuf,
    },
    /// A file could not be written.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The I/O failure.
        source: std::io::Error,
    },
}

/// The values a `.tmpl` file's placeholders are filled with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placeholders {
    /// `{{name}}`: the policy's name as given (the package name, and the
    /// component file `NAME.wasm`).
    pub name: String,
    /// `{{crate_name}}`: the name with `-` replaced by `_` (Rust's library and
    /// artefact name).
    pub crate_name: String,
    /// `{{wit_package}}`: the WIT package the project targets.
    pub wit_package: String,
}

impl Placeholders {
    /// The placeholders of a project called `name`.
    pub fn for_name(name: &str) -> Placeholders {
        Placeholders {
            name: name.to_string(),
            crate_name: name.replace('-', "_"),
            wit_package: parcae_runtime::WIT_PACKAGE.to_string(),
        }
    }

    /// `text` with every placeholder filled.
    pub fn fill(&self, text: &str) -> String {
        text.replace("{{name}}", &self.name)
            .replace("{{crate_name}}", &self.crate_name)
            .replace("{{wit_package}}", &self.wit_package)
    }
}

/// Checks that `name` can name a Cargo crate, an npm package and a file.
pub fn check_name(name: &str) -> Result<(), ScaffoldError> {
    let bad = |reason| Err(ScaffoldError::BadName { name: name.to_string(), reason });
    if name.is_empty() || name.len() > 64 {
        return bad("the length is out of range");
    }
    if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        return bad("it does not start with a lowercase letter");
    }
    if !name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_') {
        return bad("it has a character other than a-z, 0-9, '-' and '_'");
    }
    Ok(())
}

/// The files of the project `name` in `lang`: (path inside the project, contents, executable).
pub fn render(name: &str, lang: Lang) -> Result<Vec<(String, String, bool)>, ScaffoldError> {
    check_name(name)?;
    let placeholders = Placeholders::for_name(name);
    let mut files: Vec<(String, String, bool)> = TEMPLATE_FILES
        .iter()
        .filter(|(template, _, _)| *template == lang.template())
        .map(|(_, path, contents)| {
            let (path, contents) = match path.strip_suffix(".tmpl") {
                Some(stripped) => (stripped.to_string(), placeholders.fill(contents)),
                None => (path.to_string(), contents.to_string()),
            };
            let executable = path.ends_with(".sh");
            (path, contents, executable)
        })
        .collect();
    files.push((WIT_PATH.to_string(), WIT.to_string(), false));
    files.sort();
    Ok(files)
}

/// Writes the project `name` in `lang` into `dir` (created; it must be absent
/// or empty). Returns the files written, relative to `dir`.
pub fn scaffold(name: &str, lang: Lang, dir: &Path) -> Result<Vec<String>, ScaffoldError> {
    let files = render(name, lang)?;
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ScaffoldError::Io { path, source }
    };
    if dir.exists() {
        let mut entries = std::fs::read_dir(dir).map_err(io(dir))?;
        if entries.next().is_some() {
            return Err(ScaffoldError::NotEmpty { path: dir.to_path_buf() });
        }
    }
    let mut written = Vec::with_capacity(files.len());
    for (relative, contents, executable) in files {
        let path = dir.join(&relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        std::fs::write(&path, contents).map_err(io(&path))?;
        if executable {
            make_executable(&path).map_err(io(&path))?;
        }
        written.push(relative);
    }
    Ok(written)
}

#[cfg(unix)]
fn make_executable(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mut permissions = std::fs::metadata(path)?.permissions();
    permissions.set_mode(permissions.mode() | 0o755);
    std::fs::set_permissions(path, permissions)
}

#[cfg(not(unix))]
fn make_executable(_path: &Path) -> std::io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_language_has_a_build_script_a_readme_a_source_and_the_contract() {
        for lang in Lang::ALL {
            let files = render("my-policy", lang).unwrap();
            let paths: Vec<&str> = files.iter().map(|(p, _, _)| p.as_str()).collect();
            for wanted in ["build.sh", "README.md", ".gitignore", WIT_PATH] {
                assert!(paths.contains(&wanted), "{lang:?} lacks {wanted}: {paths:?}");
            }
            assert!(paths.iter().all(|p| !p.ends_with(".tmpl")), "{lang:?}: {paths:?}");
            for (path, contents, executable) in &files {
                assert!(!contents.contains("{{"), "{lang:?} {path}: an unfilled placeholder");
                assert_eq!(*executable, path.ends_with(".sh"), "{path}");
            }
            let readme = &files.iter().find(|(p, _, _)| p == "README.md").unwrap().1;
            assert!(readme.contains("parcae-host policy check my-policy.wasm"), "{lang:?} README:\n{readme}");
            let build = &files.iter().find(|(p, _, _)| p == "build.sh").unwrap().1;
            assert!(build.contains("my-policy.wasm"), "{lang:?} build.sh names its output:\n{build}");
        }
    }

    #[test]
    fn names_are_checked_and_filled_in() {
        assert!(check_name("mine").is_ok() && check_name("my_policy-2").is_ok());
        for bad in ["", "Mine", "2fast", "my policy", "../up", "a/b", &"x".repeat(65)] {
            let e = check_name(bad).unwrap_err().to_string();
            assert!(e.starts_with(&format!("policy name '{bad}': ")), "{e}");
        }
        let p = Placeholders::for_name("my-policy");
        assert_eq!(
            p.fill("{{name}} {{crate_name}} {{wit_package}}"),
            "my-policy my_policy parcae:policy@0.3.0"
        );
    }

    #[test]
    fn the_js_template_pins_the_repository_toolchain() {
        // The scaffold's package-lock.json is the toolchain's (tools/componentize-js) with the name changed.
        let files = render("mine", Lang::Js).unwrap();
        let lock = &files.iter().find(|(p, _, _)| p == "package-lock.json").unwrap().1;
        let lock: serde_json::Value = serde_json::from_str(lock).unwrap();
        let tool: serde_json::Value =
            serde_json::from_str(include_str!("../../../tools/componentize-js/package-lock.json")).unwrap();
        assert_eq!(lock["name"], "mine");
        let without_root = |v: &serde_json::Value| {
            let mut packages = v["packages"].as_object().unwrap().clone();
            packages.remove("");
            packages
        };
        assert_eq!(
            without_root(&lock),
            without_root(&tool),
            "regenerate templates/policy-js/package-lock.json.tmpl"
        );
        let package = &files.iter().find(|(p, _, _)| p == "package.json").unwrap().1;
        let package: serde_json::Value = serde_json::from_str(package).unwrap();
        let tool: serde_json::Value =
            serde_json::from_str(include_str!("../../../tools/componentize-js/package.json")).unwrap();
        assert_eq!(package["dependencies"], tool["dependencies"]);
        assert_eq!(lock["packages"][""]["dependencies"], tool["dependencies"]);
    }

    #[test]
    fn a_project_is_written_once() {
        let dir = std::env::temp_dir().join(format!("parcae-scaffold-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let written = scaffold("mine", Lang::Python, &dir).unwrap();
        assert!(written.contains(&"build.sh".to_string()));
        assert_eq!(std::fs::read_to_string(dir.join(WIT_PATH)).unwrap(), WIT);
        let e = scaffold("mine", Lang::Python, &dir).unwrap_err().to_string();
        assert!(e.ends_with("exists and is not empty; pick another name or --dir"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
