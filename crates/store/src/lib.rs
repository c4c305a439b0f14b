//! Durable storage for a Parcae job: checkpoints and the job's state, in a local
//! directory or an object store, behind one small interface on top of the
//! [`object_store`] crate.
//!
//! A store is named by a URL ([`StoreSpec`]):
//!
//! - `file:///abs/dir` (or a plain path): a local directory. Every object is
//!   written to a temporary file and renamed into place, so a reader sees a whole
//!   object or none.
//! - `s3://bucket/prefix`: Amazon S3 or any S3-compatible server, configured from
//!   the usual AWS environment (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//!   `AWS_SESSION_TOKEN`, `AWS_REGION`, `AWS_ENDPOINT_URL`, instance credentials),
//!   with an optional endpoint override ([`StoreSpec::endpoint`]).
//! - `gs://bucket/prefix` and `az://container/prefix`: Google Cloud Storage and
//!   Azure Blob Storage, configured from their usual environment
//!   (`GOOGLE_SERVICE_ACCOUNT`, `AZURE_STORAGE_ACCOUNT_NAME`, ... as `object_store`
//!   reads them).
//!
//! Keys are `/`-separated paths relative to the URL's prefix
//! (`checkpoints/step-00000012/stage-00/manifest.txt`). An object becomes
//! visible only once it is completely written (S3 `PUT` and multipart
//! completion are atomic; local files are renamed into place), which is what
//! lets a checkpoint's completion marker, written last, mean "everything
//! before me is there".

#[cfg(feature = "moto")]
pub mod moto;

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::TryStreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart};
use serde::{Deserialize, Serialize};
use tracing::debug;
use url::Url;

/// Objects larger than this are uploaded in parts (S3 multipart upload); smaller ones in one
/// `PUT`. Either way the object appears only when the upload completes.
pub const MULTIPART_THRESHOLD: usize = 16 << 20;

/// Part size of a multipart upload.
pub const PART_SIZE: usize = 8 << 20;

/// Where a store lives: what `--checkpoint-url` and `--checkpoint-endpoint` say. It travels
/// from the host to its workers so that they write to the same place; credentials never
/// travel, each process takes them from its own environment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreSpec {
    /// `file:///dir`, a plain directory path, `s3://bucket/prefix`, `gs://bucket/prefix` or
    /// `az://container/prefix`.
    pub url: String,
    /// An S3-compatible endpoint to use instead of AWS's (`http://127.0.0.1:9000`); None: the
    /// environment's `AWS_ENDPOINT_URL`, else AWS itself.
    pub endpoint: Option<String>,
}

impl StoreSpec {
    /// A store at `url` with no endpoint override.
    pub fn new(url: impl Into<String>) -> Self {
        StoreSpec { url: url.into(), endpoint: None }
    }

    /// The local directory `dir` as a store.
    pub fn local(dir: impl Into<PathBuf>) -> Self {
        StoreSpec { url: dir.into().display().to_string(), endpoint: None }
    }
}

impl fmt::Display for StoreSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.endpoint {
            Some(endpoint) => write!(f, "{} (endpoint {endpoint})", self.url),
            None => f.write_str(&self.url),
        }
    }
}

/// Why a store operation failed. Every variant names the URL or object concerned.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The URL could not be understood.
    #[error("store URL `{url}`: {reason}")]
    Url {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The object does not exist.
    #[error("{location}: no such object")]
    NotFound {
        /// The object's full location.
        location: String,
    },
    /// The backend refused or failed the operation.
    #[error("{location}: {source}")]
    Backend {
        /// The object (or prefix) concerned.
        location: String,
        /// The backend's error.
        source: object_store::Error,
    },
    /// A local directory could not be created.
    #[error("{path}: {source}")]
    Io {
        /// The directory.
        path: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
}

/// A handle on one store: cheap to clone, usable from any task.
#[derive(Debug, Clone)]
pub struct Store {
    inner: Arc<dyn ObjectStore>,
    /// The prefix every key lives under.
    root: ObjectPath,
    /// How a location is shown: a directory for local stores, else `scheme://bucket/prefix`.
    base: Base,
    spec: StoreSpec,
}

#[derive(Debug, Clone)]
enum Base {
    Local(PathBuf),
    Remote(String),
}

impl Store {
    /// Opens the store `spec` names (a local directory is created if missing). Nothing is
    /// contacted yet: credentials and reachability show at the first operation.
    pub fn open(spec: &StoreSpec) -> Result<Store, StoreError> {
        Self::open_with_env(spec, &[])
    }

    /// [`Store::open`] with `vars` taking the place of environment variables of the same
    /// names (`AWS_ACCESS_KEY_ID`, `AWS_ENDPOINT_URL`, ...), for a process that must not
    /// change its own environment (tests; several stores with different credentials).
    pub fn open_with_env(spec: &StoreSpec, vars: &[(&str, String)]) -> Result<Store, StoreError> {
        let var = |name: &str| {
            vars.iter().find(|(k, _)| *k == name).map(|(_, v)| v.clone()).or_else(|| std::env::var(name).ok())
        };
        let bad = |reason: String| StoreError::Url { url: spec.url.clone(), reason };
        let url = match Url::parse(&spec.url) {
            Ok(url) if url.scheme().len() > 1 => url,
            // A plain (or Windows-drive) path.
            _ => {
                let path = std::path::absolute(&spec.url).map_err(|e| bad(e.to_string()))?;
                Url::from_directory_path(&path).map_err(|()| bad("not an absolute path".into()))?
            }
        };
        match url.scheme() {
            "file" => {
                if spec.endpoint.is_some() {
                    return Err(bad("an endpoint override applies to s3:// URLs only".into()));
                }
                let dir = url.to_file_path().map_err(|()| bad("not a local path".into()))?;
                std::fs::create_dir_all(&dir)
                    .map_err(|source| StoreError::Io { path: dir.clone(), source })?;
                let fs = object_store::local::LocalFileSystem::new_with_prefix(&dir)
                    .map_err(|source| StoreError::Backend { location: dir.display().to_string(), source })?
                    .with_automatic_cleanup(true);
                Ok(Store {
                    inner: Arc::new(fs),
                    root: ObjectPath::default(),
                    base: Base::Local(dir),
                    spec: spec.clone(),
                })
            }
            "s3" | "s3a" => {
                let bucket =
                    url.host_str().filter(|b| !b.is_empty()).ok_or_else(|| bad("no bucket".into()))?;
                let mut builder = object_store::aws::AmazonS3Builder::from_env();
                for (key, value) in vars.iter().filter(|(k, _)| k.starts_with("AWS_")) {
                    if let Ok(config) = key.to_ascii_lowercase().parse() {
                        builder = builder.with_config(config, value);
                    }
                }
                builder = builder.with_bucket_name(bucket);
                let endpoint = spec.endpoint.clone().or_else(|| var("AWS_ENDPOINT_URL"));
                if let Some(endpoint) = endpoint {
                    Url::parse(&endpoint).map_err(|e| bad(format!("endpoint `{endpoint}`: {e}")))?;
                    builder =
                        builder.with_allow_http(endpoint.starts_with("http://")).with_endpoint(endpoint);
                }
                let s3 = builder.build().map_err(|e| bad(e.to_string()))?;
                Self::remote(spec, Arc::new(s3), &url, bucket)
            }
            "gs" => {
                let bucket =
                    url.host_str().filter(|b| !b.is_empty()).ok_or_else(|| bad("no bucket".into()))?;
                let gcs = object_store::gcp::GoogleCloudStorageBuilder::from_env()
                    .with_bucket_name(bucket)
                    .build()
                    .map_err(|e| bad(e.to_string()))?;
                Self::remote(spec, Arc::new(gcs), &url, bucket)
            }
            "az" | "azure" => {
                let container =
                    url.host_str().filter(|b| !b.is_empty()).ok_or_else(|| bad("no container".into()))?;
                let azure = object_store::azure::MicrosoftAzureBuilder::from_env()
                    .with_container_name(container)
                    .build()
                    .map_err(|e| bad(e.to_string()))?;
                Self::remote(spec, Arc::new(azure), &url, container)
            }
            other => Err(bad(format!("unsupported scheme `{other}` (file, s3, gs or az)"))),
        }
    }

    fn remote(
        spec: &StoreSpec,
        inner: Arc<dyn ObjectStore>,
        url: &Url,
        bucket: &str,
    ) -> Result<Store, StoreError> {
        let prefix = url.path().trim_matches('/');
        let root = ObjectPath::parse(prefix).map_err(|e| StoreError::Url {
            url: spec.url.clone(),
            reason: format!("prefix `{prefix}`: {e}"),
        })?;
        let mut base = format!("{}://{bucket}", url.scheme());
        if !prefix.is_empty() {
            base.push('/');
            base.push_str(prefix);
        }
        Ok(Store { inner, root, base: Base::Remote(base), spec: spec.clone() })
    }

    /// The spec this store was opened from.
    pub fn spec(&self) -> &StoreSpec {
        &self.spec
    }

    /// Whether this is a local directory.
    pub fn is_local(&self) -> bool {
        matches!(self.base, Base::Local(_))
    }

    /// Where `key` lives, for messages and logs: a file path for a local store, else a URL.
    pub fn location(&self, key: &str) -> String {
        match &self.base {
            Base::Local(dir) => self.local_path(key).unwrap_or_else(|| dir.clone()).display().to_string(),
            Base::Remote(base) if key.is_empty() => base.clone(),
            Base::Remote(base) => format!("{base}/{}", key.trim_matches('/')),
        }
    }

    /// The file that holds `key` in a local store (None for object stores).
    pub fn local_path(&self, key: &str) -> Option<PathBuf> {
        match &self.base {
            Base::Local(dir) => Some(
                key.split('/')
                    .filter(|part| !part.is_empty())
                    .fold(dir.clone(), |path, part| path.join(part)),
            ),
            Base::Remote(_) => None,
        }
    }

    fn path(&self, key: &str) -> Result<ObjectPath, StoreError> {
        let key = key.trim_matches('/');
        let relative = ObjectPath::parse(key)
            .map_err(|e| StoreError::Url { url: self.location(key), reason: format!("key `{key}`: {e}") })?;
        Ok(if self.root.as_ref().is_empty() {
            relative
        } else {
            ObjectPath::from_iter(self.root.parts().chain(relative.parts()))
        })
    }

    fn backend<'a>(&'a self, key: &'a str) -> impl FnOnce(object_store::Error) -> StoreError + 'a {
        move |source| match source {
            object_store::Error::NotFound { .. } => StoreError::NotFound { location: self.location(key) },
            source => StoreError::Backend { location: self.location(key), source },
        }
    }

    /// Writes `bytes` as the object `key`, replacing it. The object becomes visible only
    /// when the whole upload completed; if this future is dropped or fails half-way, readers
    /// still see the old object (or none). Returns the bytes written.
    pub async fn put(&self, key: &str, bytes: Bytes) -> Result<u64, StoreError> {
        let path = self.path(key)?;
        let len = bytes.len() as u64;
        if bytes.len() <= MULTIPART_THRESHOLD {
            self.inner.put(&path, PutPayload::from(bytes)).await.map_err(self.backend(key))?;
        } else {
            let upload = self.inner.put_multipart(&path).await.map_err(self.backend(key))?;
            let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_SIZE);
            for chunk in bytes.chunks(PART_SIZE) {
                writer.wait_for_capacity(4).await.map_err(self.backend(key))?;
                writer.write(chunk);
            }
            writer.finish().await.map_err(self.backend(key))?;
        }
        debug!(location = %self.location(key), bytes = len, "stored");
        Ok(len)
    }

    /// Reads the whole object `key` ([`StoreError::NotFound`] when there is none).
    pub async fn get(&self, key: &str) -> Result<Bytes, StoreError> {
        let path = self.path(key)?;
        let result = self.inner.get(&path).await.map_err(self.backend(key))?;
        result.bytes().await.map_err(self.backend(key))
    }

    /// Reads the object `key`, None when there is none.
    pub async fn get_opt(&self, key: &str) -> Result<Option<Bytes>, StoreError> {
        match self.get(key).await {
            Ok(bytes) => Ok(Some(bytes)),
            Err(StoreError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Whether the object `key` exists.
    pub async fn exists(&self, key: &str) -> Result<bool, StoreError> {
        let path = self.path(key)?;
        match self.inner.head(&path).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(source) => Err(StoreError::Backend { location: self.location(key), source }),
        }
    }

    /// Every object key under `prefix` (relative to the store's root), sorted.
    pub async fn list(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        let path = self.path(prefix)?;
        let prefix_path = (!path.as_ref().is_empty()).then_some(&path);
        let metas: Vec<object_store::ObjectMeta> = self
            .inner
            .list(prefix_path)
            .try_collect()
            .await
            .map_err(|source| StoreError::Backend { location: self.location(prefix), source })?;
        let skip = self.root.parts().count();
        let mut keys: Vec<String> = metas
            .into_iter()
            .map(|m| {
                m.location.parts().skip(skip).map(|p| p.as_ref().to_string()).collect::<Vec<_>>().join("/")
            })
            .collect();
        keys.sort();
        Ok(keys)
    }

    /// Deletes the object `key` (nothing to do when it does not exist).
    pub async fn delete(&self, key: &str) -> Result<(), StoreError> {
        let path = self.path(key)?;
        match self.inner.delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(source) => Err(StoreError::Backend { location: self.location(key), source }),
        }
    }

    /// Deletes every object under `prefix`; returns how many there were.
    pub async fn delete_prefix(&self, prefix: &str) -> Result<usize, StoreError> {
        let keys = self.list(prefix).await?;
        for key in &keys {
            self.delete(key).await?;
        }
        if let Some(dir) = self.local_path(prefix) {
            // Leave no empty directories behind in a local store.
            let _ = std::fs::remove_dir_all(dir);
        }
        Ok(keys.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("parcae-store-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[tokio::test]
    async fn a_local_store_writes_reads_lists_and_deletes_under_its_directory() {
        let dir = scratch("local");
        let url = Url::from_directory_path(&dir).unwrap().to_string();
        let store = Store::open(&StoreSpec::new(url)).unwrap();
        assert!(store.is_local());
        store.put("a/b/one.bin", Bytes::from_static(b"one")).await.unwrap();
        store.put("a/two.bin", Bytes::from(vec![7u8; MULTIPART_THRESHOLD + 3])).await.unwrap();
        assert_eq!(std::fs::read(dir.join("a/b/one.bin")).unwrap(), b"one");
        assert_eq!(store.get("a/two.bin").await.unwrap().len(), MULTIPART_THRESHOLD + 3);
        assert_eq!(store.list("a").await.unwrap(), vec!["a/b/one.bin", "a/two.bin"]);
        assert_eq!(store.list("a/b").await.unwrap(), vec!["a/b/one.bin"]);
        assert!(store.exists("a/b/one.bin").await.unwrap());
        assert!(!store.exists("a/b/none.bin").await.unwrap());
        let missing = store.get("a/none").await.unwrap_err();
        assert!(matches!(missing, StoreError::NotFound { .. }), "{missing}");
        assert!(missing.to_string().contains("a/none"), "{missing}");
        assert_eq!(store.get_opt("a/none").await.unwrap(), None);
        assert_eq!(store.location("a/b/one.bin"), dir.join("a/b/one.bin").display().to_string());
        assert_eq!(store.delete_prefix("a/b").await.unwrap(), 1);
        assert_eq!(store.list("").await.unwrap(), vec!["a/two.bin"]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn a_plain_path_is_a_local_store() {
        let dir = scratch("plain");
        let store = Store::open(&StoreSpec::local(&dir)).unwrap();
        store.put("x", Bytes::from_static(b"1")).await.unwrap();
        assert_eq!(std::fs::read(dir.join("x")).unwrap(), b"1");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn bad_urls_are_refused_with_the_reason() {
        let err = |url: &str, endpoint: Option<&str>| {
            Store::open(&StoreSpec { url: url.into(), endpoint: endpoint.map(String::from) })
                .unwrap_err()
                .to_string()
        };
        assert!(err("ftp://host/x", None).contains("unsupported scheme `ftp`"));
        assert!(err("s3:///prefix", None).contains("no bucket"));
        assert!(err("s3://bucket/p", Some("not a url")).contains("endpoint `not a url`"));
        let dir = scratch("endpoint");
        assert!(err(dir.to_str().unwrap(), Some("http://x")).contains("s3:// URLs only"));
    }

    #[test]
    fn an_s3_store_shows_its_locations_as_urls() {
        let spec =
            StoreSpec { url: "s3://bucket/runs/a/".into(), endpoint: Some("http://127.0.0.1:1".into()) };
        let store = Store::open(&spec).unwrap();
        assert!(!store.is_local());
        assert_eq!(store.location("job.json"), "s3://bucket/runs/a/job.json");
        assert_eq!(store.location(""), "s3://bucket/runs/a");
        assert_eq!(store.local_path("job.json"), None);
        assert_eq!(store.path("x/y").unwrap().as_ref(), "runs/a/x/y");
    }
}
