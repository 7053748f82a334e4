//! Errors of the object store; messages say what to do.

use cairn_pool::PoolError;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(transparent)]
    Pool(PoolError),
    #[error("corrupt metadata: {0}")]
    Corrupt(String),
    #[error("{0} is newer than this cairn understands: upgrade cairn to open this pool")]
    NewerFormat(String),
    #[error("not a valid send stream: {0}; nothing was received")]
    BadStream(String),
    #[error("the receive stopped ({why}); what arrived is kept: {resume}")]
    ReceiveKept { why: String, resume: String },
    #[error("object {0} is too large to address")]
    TooLarge(u64),
    #[error("dataset '{0}' does not exist; see `cairn dataset list`")]
    NoSuchDataset(String),
    #[error("dataset '{0}' already exists")]
    DatasetExists(String),
    #[error("'{0}': no such file or directory")]
    NotFound(String),
    #[error("'{0}' is not a directory")]
    NotADirectory(String),
    #[error("'{0}' is a directory")]
    IsADirectory(String),
    #[error("'{0}' already exists")]
    Exists(String),
    #[error("directory '{0}' is not empty")]
    NotEmpty(String),
    #[error("out of space in pool '{0}': delete data or add a vdev")]
    NoSpace(String),
    #[error("dataset '{0}' is read-only (readonly=on); `cairn set readonly=off {0}` to write")]
    ReadOnly(String),
    #[error("bad property: {0}")]
    BadProperty(String),
    #[error("'{0}' is a {1}; {2}")]
    WrongKind(String, &'static str, &'static str),
    #[error("name '{0}' is longer than 255 bytes")]
    NameTooLong(String),
    #[error("{0} (rename some of these names, or spread them over directories)")]
    DirectoryFull(String),
    #[error("not permitted: {0}")]
    NotPermitted(String),
    #[error("no extended attribute '{0}'")]
    NoAttribute(String),
    #[error("extended attributes of one file are limited to {0} bytes in all")]
    AttributesFull(usize),
    #[error("dataset '{dataset}' is over its {property} ({limit} bytes): delete files, or raise it (`cairn set {property}=SIZE {dataset}`)")]
    QuotaExceeded {
        dataset: String,
        property: String,
        limit: u64,
    },
    #[error("invalid name '{0}': {1}")]
    BadName(String, String),
    #[error("{path}: {source}")]
    LocalIo {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot read '{0}': its data is damaged beyond the pool's redundancy (see `cairn status -v`)")]
    DataLost(String),
    #[error("offset {offset} + {len} is past the end of volume '{name}' ({size} bytes)")]
    PastEnd {
        name: String,
        offset: u64,
        len: u64,
        size: u64,
    },
}

impl StoreError {
    /// Whether this error means data could not be read back correctly.
    pub fn is_data_loss(&self) -> bool {
        matches!(self, StoreError::Pool(PoolError::Vdev(_)))
    }
}
