#pragma once
// The user cache of the shipped calibration's fit (costmodels/README.md, "Start-up cache"):
// ProfileTables::builtin() and CalibratedComputeModel::builtin() read their state from it when
// an entry made by the same code from the same input bytes exists, and fit and store it when
// not. Private to costmodels.
#include <memory>
#include <optional>
#include <string>

#include "cephalo/costmodels/catalog.hpp"

namespace cephalo::costmodels {
class ProfileTables;
class CalibratedComputeModel;

// Reads, writes the state of the two types (friends of both).
struct FitCacheCodec {
  static void encode(const ProfileTables& tables, std::string& out);
  static ProfileTables decode_tables(const char*& p, const char* end);
  static void encode(const CalibratedComputeModel& model, const ProfileTables& fitted_on,
                     std::string& out);
  static std::shared_ptr<CalibratedComputeModel> decode_model(const char*& p, const char* end,
                                                              const ProfileTables& fitted_on);
};

namespace fit_cache {
// The built-in catalogs' indexes (CatalogIndex) from a valid entry, else nullopt; each is handed
// out once (GpuCatalog::builtin() and ModelCatalog::builtin() adopt it). The entry's key covers
// the catalog files' bytes and it is stored only after they were read whole without error, so
// an adopted catalog is the one reading the file would give, errors included.
enum class BuiltinCatalog { Gpus, Models };
std::optional<CatalogIndex> cached_catalog(BuiltinCatalog which);
// The shipped tables from a valid cache entry, else nullptr (nothing read yet, disabled, missing,
// stale, foreign or corrupt: the caller loads them from the JSON).
std::unique_ptr<ProfileTables> cached_tables();
// The model fitted on `tables` (ProfileTables::builtin()) from the same entry, else nullptr.
std::shared_ptr<CalibratedComputeModel> cached_model(const ProfileTables& tables);
// Stores both, and the built-in catalogs' indexes (atomically; any failure is ignored: the cache
// only saves time).
void store(const ProfileTables& tables, const CalibratedComputeModel& model);
}  // namespace fit_cache

}  // namespace cephalo::costmodels
