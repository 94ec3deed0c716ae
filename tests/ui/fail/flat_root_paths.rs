// 0.1.0 starts clean: the operators' and tools' types live in their modules
// (`leasehold::store`, `leasehold::operator`, `leasehold::runtime`,
// `leasehold::schedule`, `leasehold::schema`); no alias at the root.
use leasehold::LeaseStore;
use leasehold::Operator;
use leasehold::RunOutcome;
use leasehold::check_schema;
use leasehold::CronSchedule;

fn main() {}
